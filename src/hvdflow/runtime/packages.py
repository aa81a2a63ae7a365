"""What every runtime gives the in-container code: the packages it needs and the variables that choose its kernels."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TRAINER_MOUNT = "/opt/hvdflow"
NUMERICS_ENV = ("TF_ENABLE_ONEDNN_OPTS", "ONEDNN_MAX_CPU_ISA")
"""Variables that choose TensorFlow's CPU kernels, passed from the caller into the container when set (the native
runtime inherits them): ``ONEDNN_MAX_CPU_ISA=AVX2`` gives an AVX-512 machine an AVX2 machine's weights."""
CONTAINER_PACKAGES = ("hvdflow_trainer", "hvdflow_index", "hvdflow_runstate", "hvdflow_wire")
"""The packages the in-container code needs: the trainer, and the index and checkpoint formats it shares with the host."""


def package_dir(name: str) -> Path:
    """The host directory of one of :data:`CONTAINER_PACKAGES`, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the in-container package {name} is not installed beside hvdflow")
    return Path(list(spec.submodule_search_locations)[0])
