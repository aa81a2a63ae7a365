"""Whether udocker's runc mode (R1) can run on this node: runc installed, and this user allowed a user namespace.

R1 runs each command as root of a user namespace that is the caller on the host, with the host's runc (Debian:
``apt install runc``, ``/usr/sbin/runc``). Many clusters allow unprivileged user namespaces (RHEL 8 and later by
default); some disable them (``user.max_user_namespaces = 0``), or the kernel refuses them otherwise (an LSM, a
seccomp filter). The probe tries one, in a forked child, exactly as runc's first step does.

Every rank of an R1 or ``auto`` run imports this module before its udocker starts
(:mod:`hvdflow.images.execmode_choice`), so it imports what is already loaded or cheap: no dataclasses, pathlib,
shutil, subprocess, platform or typing (together 20 ms of each rank's start, measured 2026-11-28), and the probe
forks instead of starting another Python (0.7 ms against 11).
"""

from __future__ import annotations

import ctypes
import os

from hvdflow.errors import UdockerError
from hvdflow.images.modes import RUNC_MODES

RUNC_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Where the host's runc is looked for (Debian installs /usr/sbin/runc, not on an ordinary user's PATH)."""


def host_runc() -> str | None:
    """The host's ``runc`` (``UDOCKER_USE_RUNC_EXECUTABLE`` where set), or None where it has none: the first
    executable ``runc`` in :data:`RUNC_SEARCH_PATH`, as ``shutil.which`` finds it (not imported: see above)."""
    chosen = os.environ.get("UDOCKER_USE_RUNC_EXECUTABLE")
    if chosen:
        return chosen
    candidates = (os.path.join(folder, "runc") for folder in RUNC_SEARCH_PATH.split(os.pathsep))
    return next((path for path in candidates if os.path.isfile(path) and os.access(path, os.X_OK)), None)


MAX_USER_NAMESPACES = "/proc/sys/user/max_user_namespaces"
CLONE_NEWUSER = 0x10000000


class RuncProbe:
    """What this node offers runc's rootless mode (a plain class: a dataclass costs a rank 5 ms of imports)."""

    __slots__ = ("node", "runc", "max_user_namespaces", "user_namespace_error")

    def __init__(self, node: str, runc: str | None, max_user_namespaces: str, user_namespace_error: str | None
                 ) -> None:
        self.node = node
        self.runc = runc
        """The runc udocker would run, or None."""
        self.max_user_namespaces = max_user_namespaces
        self.user_namespace_error = user_namespace_error
        """Why this user cannot create a user namespace here (the kernel's error), or None where it can."""

    def cause(self) -> str | None:
        """Why runc's rootless mode cannot run here, naming the node; None where it can."""
        if self.user_namespace_error is not None:
            cause = ("user namespaces are disabled" if self.max_user_namespaces == "0"
                     else f"this user cannot create a user namespace ({self.user_namespace_error})")
            return f"{cause} on {self.node} (user.max_user_namespaces = {self.max_user_namespaces})"
        if self.runc is None:
            return f"runc is not installed on {self.node} (looked for it on PATH and in /usr/sbin, /sbin)"
        return None

    def problem(self, mode: str) -> str | None:
        """Why ``mode`` cannot run here, naming the node, the cause and the way out; None where it can."""
        cause = self.cause()
        if cause is None:
            return None
        way_out = "install runc (Debian: apt install runc), or " if self.user_namespace_error is None else ""
        return f"{cause}: execmode {mode} cannot run; {way_out}use execmode auto or P1"


def user_namespace_error() -> str | None:
    """Why this process cannot create a user namespace (the kernel's error), or None where it can: ``unshare`` tried
    in a forked child, which does nothing else before it exits (safe in a threaded caller: no lock is taken)."""
    unshare = ctypes.CDLL(None, use_errno=True).unshare
    pid = os.fork()
    if pid == 0:
        os._exit(0 if unshare(CLONE_NEWUSER) == 0 else ctypes.get_errno() or 255)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return None if code == 0 else os.strerror(code)


def probe_runc_mode() -> RuncProbe:
    """Probe this node: runc found (:func:`host_runc`), a user namespace created (:func:`user_namespace_error`)."""
    try:
        with open(MAX_USER_NAMESPACES) as limit_file:
            limit = limit_file.read().strip()
    except OSError:
        limit = "unknown"
    return RuncProbe(os.uname().nodename, host_runc(), limit, user_namespace_error())


def launcher_refused(execmode: str | None, launcher: str) -> str | None:
    """Why ``launcher`` cannot start ranks in ``execmode``; None where it can. Open MPI's ranks under R1 cannot reach
    the host mpirun's PMIx server from runc's namespaces: MPI_Init failed ("OPAL ERROR: Unreachable", 2026-11-27)."""
    if launcher == "mpi" and execmode in RUNC_MODES:
        return (f"execmode {execmode} cannot run launcher mpi: ranks in runc's namespaces cannot reach mpirun's PMIx "
                "server (MPI_Init fails: OPAL ERROR: Unreachable); use launcher gloo, or execmode auto (which runs Open MPI's "
                "ranks under P1) or P1")
    return None


def require_runc_mode(mode: str) -> None:
    """UdockerError naming why ``mode`` cannot run on this node; nothing where it can, or where it is no runc mode
    (the probe is not run)."""
    if mode not in RUNC_MODES:
        return
    problem = probe_runc_mode().problem(mode)
    if problem is not None:
        raise UdockerError(problem)
