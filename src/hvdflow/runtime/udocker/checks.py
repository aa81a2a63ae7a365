"""udocker's checks of this host for ``hvdflow doctor`` (its kind's ``host_checks``): its directory (writable, room,
the user's own), the kernel's seccomp acceleration of proot, and that the profile's proot runs (ptrace allowed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from hvdflow.errors import HvdflowError
from hvdflow.files.heartbeat import size_text
from hvdflow.files.private import existing_parent, in_shared_place
from hvdflow.findings import Finding, failure, ok, warning
from hvdflow.images.udocker_tools import HOST_PROOT, engine_binary
from hvdflow.runtime.settings import RuntimeSettings

UDOCKER_FREE_WARNING = 10 * 1024 ** 3
"""Free space below which the udocker directory gets a warning: an image is 1-3 GiB pulled, as much again created."""


def udocker_directory(settings: RuntimeSettings) -> Finding:
    """udocker's directory: writable (or creatable) by this user, free space, the user's alone in a shared place."""
    where = settings.udocker_dir
    base = existing_parent(where)
    if not os.access(base, os.W_OK | os.X_OK):
        return failure("udocker directory", f"{where}: {base} is not writable by this user",
                       "set runtime.udocker_dir in the profile's hvdflow.yaml to a folder of yours that every node sees")
    free = shutil.disk_usage(base).free
    detail = f"{where} ({'exists' if where.exists() else 'will be made'}), {size_text(free)} free"
    if where.exists() and in_shared_place(where) and where.stat().st_uid != os.getuid():
        return failure("udocker directory", f"{detail}; it belongs to uid {where.stat().st_uid}",
                       "choose a runtime.udocker_dir of your own: another user's folder would hold your images")
    if free < UDOCKER_FREE_WARNING:
        return warning("udocker directory", detail, f"free at least {size_text(UDOCKER_FREE_WARNING)} there, or move "
                       "runtime.udocker_dir: each image takes 1-3 GiB pulled and as much again as a container")
    return ok("udocker directory", detail)


def seccomp_trace() -> Finding:
    """Whether the kernel's seccomp can hand system calls to a tracer (``trace`` among its actions), which proot's
    acceleration uses: without it every system call stops the process."""
    actions = Path("/proc/sys/kernel/seccomp/actions_avail")
    available = actions.read_text().split() if actions.exists() else []
    if "trace" in available:
        return ok("seccomp", "the kernel's seccomp offers trace: proot's acceleration works")
    return warning("seccomp", f"{actions} lists {' '.join(available) or 'nothing'}: proot stops on every system call",
                   "expect P1 to run like P2 here; runtime kind native (a venv of the image's packages) avoids proot")


def _proot_for(settings: RuntimeSettings) -> Optional[Path]:
    """The proot the profile runs: the host's, or the one a container in the udocker directory carries; None if
    no container is there yet."""
    proot = settings.options.proot
    if proot == "host":
        return HOST_PROOT
    for container in sorted((settings.udocker_dir / "containers").glob("*")):
        try:
            return engine_binary(settings.udocker_dir, container.name, proot)
        except HvdflowError:
            continue
    return None


def proot_runs(settings: RuntimeSettings) -> Finding:
    """The profile's proot runs a command here (ptrace is allowed: some sites forbid it)."""
    proot = _proot_for(settings)
    if proot is None:
        return warning("proot", "no image is pulled yet, so the image's proot cannot be tried",
                       "run the workflow once (it pulls the images), then run hvdflow doctor again")
    if not proot.exists():
        return failure("proot", f"{proot} is missing (profile runtime.proot: {settings.options.proot})",
                       "set runtime.proot: image in the profile's hvdflow.yaml (the image carries one)")
    proc = subprocess.run([str(proot), "-r", "/", "/bin/true"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope")
        said = f" (kernel.yama.ptrace_scope = {scope.read_text().strip()})" if scope.exists() else ""
        return failure("proot", f"{proot} -r / /bin/true exited {proc.returncode}{said}: "
                       f"{(proc.stderr or proc.stdout).strip()[-300:]}",
                       "proot needs ptrace: ask the site for ptrace_scope 0 or 1, or use runtime kind native")
    return ok("proot", f"{proot} runs commands (ptrace allowed)")


def udocker_host_checks(settings: RuntimeSettings) -> list[Finding]:
    """udocker's checks of this host, in the order doctor shows them."""
    return [udocker_directory(settings), seccomp_trace(), proot_runs(settings)]
