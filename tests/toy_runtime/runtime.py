"""The toy runtime: a command runs in the image's root filesystem, entered with ``unshare`` and ``chroot``."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from hvdflow.errors import ConfigError
from hvdflow.runtime.packages import CONTAINER_PACKAGES, TRAINER_MOUNT, package_dir
from hvdflow.runtime.record import ContainerRecord
from hvdflow.runtime.settings import RuntimeSettings
from hvdflow_wire.task import NvidiaSetup

SYSTEM_BINDS = ("/proc", "/dev", "/sys", "/etc/hosts")
"""The host's, bound into the root (``/etc/hosts``: Gloo finds this host's address by its name, as under udocker)."""
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""Where unshare, mount and chroot are (chroot in /usr/sbin, which an ordinary user's PATH often lacks)."""


def _tool(name: str) -> str:
    found = shutil.which(name, path=SYSTEM_PATH)
    if found is None:
        raise ConfigError(f"runtime toy needs {name} (util-linux, coreutils)")
    return found


@dataclass(frozen=True)
class ToyOptions:
    """No settings of its own."""

    def store_execmode(self) -> Optional[str]:
        """None: the catalogue's mode (only the container's root filesystem is used)."""
        return None


def toy_options(where: str, values: Mapping[str, Any], launcher: str) -> ToyOptions:
    """The toy's keys of the section: none."""
    return ToyOptions()


@dataclass(frozen=True)
class ToyRuntime:
    """Commands run by the image's ``python3`` in its root filesystem ``root``."""

    root: Path
    name: str = "toy"

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """``unshare`` a user and a mount namespace, bind the system's and the caller's paths and the in-container
        packages into the root, and ``chroot`` there to run ``argv`` with ``env``."""
        binds = [(p, p) for p in SYSTEM_BINDS] + [(str(p), str(p)) for p in paths]
        binds += [(str(package_dir(name)), f"{TRAINER_MOUNT}/{name}") for name in CONTAINER_PACKAGES]
        for source, target in binds:
            place = self.root / target.lstrip("/")
            if Path(source).is_dir():
                place.mkdir(parents=True, exist_ok=True)
            elif not place.exists():
                place.parent.mkdir(parents=True, exist_ok=True)
                place.touch()
        full_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": TRAINER_MOUNT,
                    "PYTHONUNBUFFERED": "1", **env}
        mount = _tool("mount")
        mounts = " && ".join(f"{mount} --rbind {shlex.quote(source)} {shlex.quote(str(self.root) + target)}"
                             for source, target in binds)
        inner = shlex.join([_tool("chroot"), str(self.root), "/usr/bin/env", "-i",
                            *[f"{k}={v}" for k, v in sorted(full_env.items())], *argv])
        return [_tool("unshare"), "--user", "--map-root-user", "--mount", "--fork", "--kill-child",
                "/bin/sh", "-c", f"{mounts} && exec {inner}"]

    def process_env(self) -> dict[str, str]:
        """The caller's environment (the command sets the container's own)."""
        return dict(os.environ)

    def gpu_setup(self) -> Optional[NvidiaSetup]:
        """None: the toy runs on CPUs."""
        return None

    def engine(self) -> dict[str, str]:
        """``unshare``, for the record."""
        return {"unshare": _tool("unshare")}

    def refusal(self, launcher: str) -> Optional[str]:
        """Open MPI's ranks are refused: mpirun's PMIx server is not reachable from the toy's namespaces."""
        return None if launcher == "gloo" else f"the toy runtime runs Gloo's ranks only, not {launcher}'s"

    def for_launcher(self, launcher: str) -> "ToyRuntime":
        """Itself."""
        return self


def toy_runtime(settings: RuntimeSettings, record: ContainerRecord, catalog: Optional[Path]) -> ToyRuntime:
    """The toy runtime of ``record``'s container: its root filesystem in udocker's store."""
    root = Path(record.udocker_dir) / "containers" / record.container / "ROOT"
    if not root.is_dir():
        raise ConfigError(f"runtime toy: {root} is not a root filesystem (pull the image first)")
    return ToyRuntime(root)


def toy_recorded_engine(settings: RuntimeSettings, image: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """None: no proot runs the toy's commands."""
    return None
