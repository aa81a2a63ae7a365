"""Where hvdflow's in-container code runs: in a udocker container, or natively in a host venv with the same stack.

Both build a command line from the same inputs, so launchers and pipeline steps do not care which one a profile
chose; the native runtime exists to measure what the container costs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence, Union

import hvdflow_trainer

from .udocker import Udocker, run_argv

TRAINER_MOUNT = "/opt/hvdflow"


def trainer_dir() -> Path:
    """The host directory of the in-container package."""
    return Path(hvdflow_trainer.__file__).parent


@dataclass(frozen=True)
class UdockerRuntime:
    """Commands run with ``udocker run`` in a created container, the trainer package bound at /opt/hvdflow."""

    udocker: Udocker
    container: str

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """``argv`` (starting with ``python3``) in the container, ``paths`` bound at the same place."""
        self._make_mountpoints([*paths, Path(TRAINER_MOUNT) / "hvdflow_trainer"])
        volumes = [str(p) for p in paths] + [f"{trainer_dir()}:{TRAINER_MOUNT}/hvdflow_trainer"]
        if hostenv:
            volumes.append("/tmp")  # Open MPI's session directory, where the ranks find the host's PMIx server
        full_env = {"PYTHONPATH": TRAINER_MOUNT, "PYTHONUNBUFFERED": "1", **env}
        return run_argv(self.udocker, self.container, argv, env=full_env, volumes=volumes, hostenv=hostenv)

    def _make_mountpoints(self, targets: Sequence[Path]) -> None:
        """Create the bind targets inside the container's root before any run starts.

        Otherwise proot resolves them through temporary "glue" directories, and a concurrent ``udocker run`` that
        creates part of the path in the root changes what the others see: a rank then failed to write its result
        (ENOENT) in about one MPI run in five.
        """
        root = self.udocker.udocker_dir / "containers" / self.container / "ROOT"
        for target in targets:
            (root / str(target).lstrip("/")).mkdir(parents=True, exist_ok=True)

    def process_env(self) -> dict[str, str]:
        """The environment the command itself is started with."""
        return self.udocker.env()


@dataclass(frozen=True)
class NativeRuntime:
    """Commands run by a host venv's interpreter that has the image's TensorFlow and Horovod wheel."""

    python: Path

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """``argv`` with ``python3`` replaced by the venv's interpreter; ``env`` set through ``env(1)``."""
        program = [str(self.python)] + list(argv[1:]) if argv and argv[0] == "python3" else list(argv)
        full_env = {"PYTHONPATH": str(trainer_dir().parent), "PYTHONUNBUFFERED": "1", **env}
        return ["env", *[f"{k}={v}" for k, v in sorted(full_env.items())], *program]

    def process_env(self) -> dict[str, str]:
        """The caller's environment, without variables that would redirect the venv's interpreter."""
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}


Runtime = Union[UdockerRuntime, NativeRuntime]
