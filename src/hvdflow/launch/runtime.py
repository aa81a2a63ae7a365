"""Where hvdflow's in-container code runs: in a udocker container, or natively in a host venv with the same stack.

Both build a command line from the same inputs, so launchers and pipeline steps do not care which one a profile
chose; the native runtime exists to measure what the container costs.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence, Union

from hvdflow.images.udocker import Udocker, run_argv

TRAINER_MOUNT = "/opt/hvdflow"
NUMERICS_ENV = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")
"""Variables that choose TensorFlow's CPU kernels, passed from the caller into the container when set (the native
runtime inherits them): ``ONEDNN_MAX_CPU_ISA=AVX2`` gives an AVX-512 machine an AVX2 machine's weights."""
CONTAINER_PACKAGES = ("hvdflow_trainer", "hvdflow_index", "hvdflow_runstate", "hvdflow_wire")
"""The packages the in-container code needs: the trainer, and the index and checkpoint formats and the files between
processes it shares with the host."""


def package_dir(name: str) -> Path:
    """The host directory of one of :data:`CONTAINER_PACKAGES`, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the in-container package {name} is not installed beside hvdflow")
    return Path(list(spec.submodule_search_locations)[0])


@dataclass(frozen=True)
class UdockerRuntime:
    """Commands run with ``udocker run`` in a created container, the in-container packages bound at /opt/hvdflow."""

    udocker: Udocker
    container: str

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """``argv`` (starting with ``python3``) in the container, ``paths`` bound at the same place."""
        self._make_mountpoints([*paths, *(Path(TRAINER_MOUNT) / name for name in CONTAINER_PACKAGES)])
        volumes = [str(p) for p in paths] + [f"{package_dir(name)}:{TRAINER_MOUNT}/{name}" for name in CONTAINER_PACKAGES]
        if hostenv:
            volumes.append("/tmp")  # Open MPI's session directory, where the ranks find the host's PMIx server
        chosen = {name: os.environ[name] for name in NUMERICS_ENV if name in os.environ}
        full_env = {"PYTHONPATH": TRAINER_MOUNT, "PYTHONUNBUFFERED": "1", **chosen, **env}
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
        roots = dict.fromkeys(str(package_dir(name).parent) for name in CONTAINER_PACKAGES)
        full_env = {"PYTHONPATH": os.pathsep.join(roots), "PYTHONUNBUFFERED": "1", **env}
        return ["env", *[f"{k}={v}" for k, v in sorted(full_env.items())], *program]

    def process_env(self) -> dict[str, str]:
        """The caller's environment, without variables that would redirect the venv's interpreter."""
        return {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONPATH")}


Runtime = Union[UdockerRuntime, NativeRuntime]
