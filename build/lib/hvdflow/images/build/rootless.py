"""Image builds without root: the whole build in a user namespace where this user is root and owns a range of ids.

``unshare --map-auto --map-root-user`` maps this user to root and the user's subordinate ids (``/etc/subuid``,
``/etc/subgid``, through the setuid ``newuidmap``/``newgidmap`` of Debian's ``uidmap``) to ids 1-65535, so the
packages' own users (``_apt``, ``messagebus``...) own their files as in a root build. In there mmdebstrap runs in its
``unshare`` mode (as root of a namespace it unshares mount, pid, uts and ipc but maps no ids again), chroot works
(``CAP_SYS_CHROOT`` of the namespace), and the layers read the owners as root's build reads them: the same recipe
gives the same digest as a root build (tested on the small recipe, measured on hvdflow-cpu).

Seen from outside the namespace, what root of the namespace writes belongs to the user, and what the packages' users
own belongs to a subordinate id: the build removes its root filesystem inside the namespace, so that only the OCI
layout (the user's) stays.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path
from typing import Optional, Sequence

from hvdflow.errors import HvdflowError

UNSHARE = ("unshare", "--map-auto", "--map-root-user")
"""The user namespace a build runs in when its user is not root (util-linux >= 2.38)."""


def namespace_root(uid_map: Path = Path("/proc/self/uid_map")) -> bool:
    """True when this process is root of a user namespace that maps root to another user (a rootless build);
    ``uid_map`` is the process's map of user ids (inner, outer, count per line)."""
    if os.geteuid() != 0:
        return False
    return uid_map.read_text().split()[:2] != ["0", "0"]


def mmdebstrap_mode() -> list[str]:
    """mmdebstrap's mode option: ``unshare`` as root of a user namespace (its root mode mounts device nodes, which a
    namespace may not create), none for real root (mmdebstrap's default, root mode)."""
    return ["--mode=unshare"] if namespace_root() else []


def _has_range(path: Path, user: str, uid: int) -> bool:
    if not path.is_file():
        return False
    for line in path.read_text().splitlines():
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] in (user, str(uid)) and fields[2].isdigit() and int(fields[2]) >= 65536:
            return True
    return False


def rootless_problem(subuid: Path = Path("/etc/subuid"), subgid: Path = Path("/etc/subgid")) -> Optional[tuple[str, str]]:
    """Why this user cannot build images without root here and what fixes it, or None if it can."""
    uid = os.geteuid()
    user = pwd.getpwuid(uid).pw_name
    for tool, package in (("mmdebstrap", "mmdebstrap"), ("unshare", "util-linux"), ("newuidmap", "uidmap"),
                          ("newgidmap", "uidmap")):
        if shutil.which(tool) is None and not Path("/usr/bin", tool).exists():
            return (f"{tool} is not installed",
                    f"ask for Debian's {package} (`apt install {package}`), or build as root, or load an archive "
                    "built elsewhere with `hvdflow image load NAME ARCHIVE`")
    limit = Path("/proc/sys/user/max_user_namespaces")
    if limit.exists() and limit.read_text().strip() == "0":
        return ("user namespaces are disabled here (user.max_user_namespaces = 0)",
                "build on a machine that allows them (`hvdflow image build NAME --archive FILE`), then "
                "`hvdflow image load NAME FILE` here")
    for path in (subuid, subgid):
        if not _has_range(path, user, uid):
            return (f"{path} gives {user} no range of 65536 subordinate ids",
                    f"ask for one (`usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}`), or "
                    "build as root")
    return None


def rootless_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` run as root of a new user namespace that holds this user's subordinate ids; HvdflowError naming what
    is missing and its fix when this user cannot make one."""
    problem = rootless_problem()
    if problem is not None:
        raise HvdflowError(f"cannot build without root: {problem[0]}; {problem[1]}")
    return [*UNSHARE, *argv]
