"""What of a rank's machine and of TensorFlow's settings can change its floating-point results, for the run record.

The CPU's model and instruction-set flags decide which kernels oneDNN and Eigen pick (AVX-512 against AVX2 sum in
other orders); oneDNN itself, op determinism, the thread counts and Horovod's tensor fusion change the order of
sums too. Each rank reports these; the host puts them in ``run.json`` so that a rerun can say why weights differ.
"""

from __future__ import annotations

import os
import platform
from typing import Dict, List, Optional

NVIDIA_DRIVER = "/proc/driver/nvidia/version"


def cpu_facts(cpuinfo: str = "/proc/cpuinfo") -> Dict[str, object]:
    """The first CPU's model name and its flags (sorted), and the machine architecture."""
    model: Optional[str] = None
    flags: List[str] = []
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = sorted(value.split())
                if model is not None and flags:
                    break
    except OSError:
        pass
    return {"model": model, "flags": flags, "architecture": platform.machine()}


def nvidia_driver(path: str = NVIDIA_DRIVER) -> Optional[str]:
    """The NVIDIA kernel driver's version line, or None where there is none."""
    try:
        with open(path) as handle:
            return handle.readline().strip() or None
    except OSError:
        return None


def gpu_facts(tf, gpus: list) -> List[Dict[str, object]]:  # type: ignore[no-untyped-def,type-arg]
    """Name and compute capability of each GPU this rank sees."""
    found = []
    for gpu in gpus:
        details = tf.config.experimental.get_device_details(gpu)
        capability = details.get("compute_capability")
        found.append({"name": details.get("device_name", gpu.name),
                      "compute_capability": ".".join(str(part) for part in capability) if capability else None})
    return found


ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def default_onednn(setting: Optional[str], flags: List[str]) -> bool:
    """Whether TensorFlow 2.9 runs its oneDNN kernels: ``TF_ENABLE_ONEDNN_OPTS`` (``setting``) if set, else by the
    CPU's ``flags``."""
    if setting is not None and setting.strip():
        return setting.strip().lower() in ("1", "true", "t", "yes", "y")
    return any(flag in flags for flag in ONEDNN_DEFAULT_FLAGS)


def numerics(tf, deterministic_allreduce: bool) -> Dict[str, object]:  # type: ignore[no-untyped-def]
    """The settings of this process that fix the order of floating-point sums.

    ``onednn_enabled`` is TensorFlow's own answer (``IsMklEnabled``): whether its oneDNN kernels run, which since
    TensorFlow 2.9 depends on the CPU (on by default only where it has AVX512_VNNI, AVX512_BF16 or AMX) unless
    ``TF_ENABLE_ONEDNN_OPTS`` says otherwise: two machines of one image can sum in different orders. oneDNN then picks
    its kernels by the CPU's instruction sets, up to ``ONEDNN_MAX_CPU_ISA`` if set: on an AVX-512 EPYC the demo's
    weights differ from an AVX2 machine's, and equal them with ``ONEDNN_MAX_CPU_ISA=AVX2`` (docs/reproducibility.md).
    """
    try:
        from tensorflow.python.util import _pywrap_util_port

        onednn: Optional[bool] = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        onednn = None
    if onednn is False and tf.__version__.startswith("2.9."):
        # TensorFlow 2.9's IsMklEnabled is the build-time answer (INTEL_MKL and ENABLE_MKL), False for the PyPI
        # wheel even where its oneDNN kernels run ("oneDNN custom operations are on"); the run-time answer follows
        # its documented default: TF_ENABLE_ONEDNN_OPTS if set, else on where the CPU has AVX512_VNNI, AVX512_BF16,
        # AVX_VNNI or AMX
        onednn = default_onednn(os.environ.get("TF_ENABLE_ONEDNN_OPTS"), cpu_facts()["flags"])  # type: ignore[arg-type]
    try:
        from tensorflow.python.framework import config as framework_config

        determinism: Optional[bool] = bool(framework_config.is_op_determinism_enabled())
    except (ImportError, AttributeError):
        determinism = None
    return {
        "onednn_enabled": onednn,
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        "ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "op_determinism": determinism,
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "deterministic_allreduce": deterministic_allreduce,
        "HOROVOD_FUSION_THRESHOLD": os.environ.get("HOROVOD_FUSION_THRESHOLD"),
    }
