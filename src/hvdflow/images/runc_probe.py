"""Whether udocker's runc mode (R1) can run on this node: runc installed, and this user allowed a user namespace.

R1 runs each command as root of a user namespace that is the caller on the host, with the host's runc (Debian:
``apt install runc``, ``/usr/sbin/runc``). Many clusters allow unprivileged user namespaces (RHEL 8 and later by
default); some disable them (``user.max_user_namespaces = 0``), or the kernel refuses them otherwise (an LSM, a
seccomp filter). The probe tries one, in a child process, exactly as runc's first step does.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.errors import UdockerError
from hvdflow.images.modes import RUNC_MODES

RUNC_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Where the host's runc is looked for (Debian installs /usr/sbin/runc, not on an ordinary user's PATH)."""


def host_runc() -> str | None:
    """The host's ``runc`` (``UDOCKER_USE_RUNC_EXECUTABLE`` where set), or None where it has none."""
    return os.environ.get("UDOCKER_USE_RUNC_EXECUTABLE") or shutil.which("runc", path=RUNC_SEARCH_PATH)


MAX_USER_NAMESPACES = Path("/proc/sys/user/max_user_namespaces")
_TRY_USER_NAMESPACE = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "sys.exit(0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno() or 255)\n"  # CLONE_NEWUSER
)


@dataclass(frozen=True)
class RuncProbe:
    """What this node offers runc's rootless mode."""

    node: str
    runc: Optional[str]
    """The runc udocker would run, or None."""
    max_user_namespaces: str
    user_namespace_error: Optional[str]
    """Why this user cannot create a user namespace here (the kernel's error), or None where it can."""

    def cause(self) -> Optional[str]:
        """Why runc's rootless mode cannot run here, naming the node; None where it can."""
        if self.user_namespace_error is not None:
            cause = ("user namespaces are disabled" if self.max_user_namespaces == "0"
                     else f"this user cannot create a user namespace ({self.user_namespace_error})")
            return f"{cause} on {self.node} (user.max_user_namespaces = {self.max_user_namespaces})"
        if self.runc is None:
            return f"runc is not installed on {self.node} (looked for it on PATH and in /usr/sbin, /sbin)"
        return None

    def problem(self, mode: str) -> Optional[str]:
        """Why ``mode`` cannot run here, naming the node, the cause and the way out; None where it can."""
        cause = self.cause()
        if cause is None:
            return None
        way_out = "install runc (Debian: apt install runc), or " if self.user_namespace_error is None else ""
        return f"{cause}: execmode {mode} cannot run; {way_out}use execmode auto or P1"


def probe_runc_mode() -> RuncProbe:
    """Probe this node: runc found (:func:`host_runc`), a user namespace created."""
    try:
        limit = MAX_USER_NAMESPACES.read_text().strip()
    except OSError:
        limit = "unknown"
    proc = subprocess.run([sys.executable, "-S", "-c", _TRY_USER_NAMESPACE], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    error = None if proc.returncode == 0 else os.strerror(proc.returncode)
    return RuncProbe(platform.node(), host_runc(), limit, error)


def launcher_refused(execmode: Optional[str], launcher: str) -> Optional[str]:
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
