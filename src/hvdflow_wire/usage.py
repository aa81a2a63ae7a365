"""How a rank used what it was given while it ran (part of ``rank-<r>.json`` and of ``run.json``'s ranks): its CPU
time against the cores it owns, its resident memory, and its GPU where it has one, sampled at a low rate by the
trainer (:mod:`hvdflow_trainer.usage`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from .values import WireError


@dataclass(frozen=True)
class GpuUsage:
    """The rank's GPU as ``nvidia-smi`` saw it at each sample: its mean utilization (percent of the time a kernel
    ran) and its peak memory in use, against the GPU's memory."""

    name: str
    utilization_percent_mean: float
    memory_used_mib_peak: float
    memory_total_mib: float


@dataclass(frozen=True)
class RankUsage:
    """One rank's use of its allocation from its start to its result.

    ``samples`` are ``[seconds since the start, CPU use of the owned cores since the previous sample (1: all of
    them busy), resident memory in MiB]``, one every ``interval_seconds`` (the interval doubles, and every other
    sample is dropped, whenever a long run would pass :data:`MAX_SAMPLES`). ``cpu_utilization`` is the whole run's:
    CPU seconds over wall seconds times ``cores``. ``gpu`` is None where ``gpu_absent`` says why.
    """

    interval_seconds: float
    cores: int
    wall_seconds: float
    cpu_seconds: float
    cpu_utilization: float
    peak_rss_mib: float
    samples: List[List[float]]
    gpu: Optional[GpuUsage]
    gpu_absent: Optional[str]

    def __post_init__(self) -> None:
        if self.cores < 1 or self.interval_seconds <= 0 or self.wall_seconds < 0 or self.cpu_seconds < 0:
            raise WireError("cores, interval_seconds, wall_seconds or cpu_seconds out of range")
        if any(len(sample) != 3 for sample in self.samples):
            raise WireError("a sample is not [seconds, cpu, rss_mib]")
        if (self.gpu is None) == (self.gpu_absent is None):
            raise WireError("either gpu or gpu_absent, not both or neither")


MAX_SAMPLES = 720
"""The most samples a rank keeps: an hour at 5 s, and a day at about two minutes."""

DEFAULT_USAGE_SECONDS = 5.0
"""Seconds between samples unless an experiment's ``usage_seconds`` says otherwise: under a thousandth of a percent of
a rank's time (``benchmarks/usage_sampling.py``), and a curve even of a minute's run."""
