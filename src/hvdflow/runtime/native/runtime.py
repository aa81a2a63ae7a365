"""The native runtime: commands run by a host venv's interpreter with the image's TensorFlow and Horovod wheel.

It exists to measure what the container costs: same TensorFlow, same Horovod build, same trainer, no udocker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from hvdflow.errors import ConfigError
from hvdflow.runtime.packages import CONTAINER_PACKAGES, package_dir
from hvdflow.runtime.record import ContainerRecord
from hvdflow.runtime.settings import RuntimeSettings
from hvdflow_wire.task import NvidiaSetup


@dataclass(frozen=True)
class NativeRuntime:
    """Commands run by a host venv's interpreter that has the image's TensorFlow and Horovod wheel."""

    python: Path
    name: str = "native"

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """``argv`` with ``python3`` replaced by the venv's interpreter; ``env`` set through ``env(1)``."""
        program = [str(self.python)] + list(argv[1:]) if argv and argv[0] == "python3" else list(argv)
        roots = dict.fromkeys(str(package_dir(name).parent) for name in CONTAINER_PACKAGES)
        full_env = {"PYTHONPATH": os.pathsep.join(roots), "PYTHONUNBUFFERED": "1", **env}
        return ["env", *[f"{k}={v}" for k, v in sorted(full_env.items())], *program]

    def process_env(self) -> dict[str, str]:
        """The caller's environment, without variables that would redirect the venv's interpreter."""
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}

    def gpu_setup(self) -> Optional[NvidiaSetup]:
        """None: the venv's processes see the node's GPUs as any host process does."""
        return None

    def engine(self) -> dict[str, str]:
        """The engine that runs the commands, for the record: the venv's interpreter."""
        return {"python": str(self.python)}

    def refusal(self, launcher: str) -> Optional[str]:
        """None: the venv runs the ranks of every launcher."""
        return None

    def for_launcher(self, launcher: str) -> "NativeRuntime":
        """Itself: the venv runs every launcher's ranks alike."""
        return self


def native_recorded_engine(settings: RuntimeSettings, image: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """None: the run record's engine (udocker's proot) has no part in a native run."""
    return None


def native_setup_log(settings: RuntimeSettings, image: str) -> Optional[Path]:
    """The log of the native venv's creation for ``image`` (the wheels, Horovod's compile, pip)."""
    from hvdflow.runtime.native.venv import build_log

    return build_log(settings.options.venv_dir, image)


def native_runtime(settings: RuntimeSettings, record: ContainerRecord, catalog: Optional[Path]) -> NativeRuntime:
    """The native runtime of ``record``'s image: its venv, created on first use (:mod:`.venv`) from the recipe
    ``catalog`` names."""
    if catalog is None:
        raise ConfigError("the native runtime needs the image catalogue (its venv is built from the image's recipe)")
    from hvdflow.runtime.native.venv import native_python

    return NativeRuntime(native_python(settings.options.venv_dir, record.image, catalog))
