"""A benchmark measurement's result (rank 0's ``rank-0.json`` in the measurement's work folder): written by rank 0 of
the trainer's ``benchmark`` entry point (either framework's folder measures), read by the host's benchmark target
(:func:`hvdflow.pipeline.benchmark.measure`), which adds how it ran and keeps it as the measurement's file.

A model's measurement holds its timing (the ``ModelTiming`` fields), the allreduce sweep's holds its times
(``allreduce``) and, with TensorFlow, the raw TCP stream (``tcp``); a key that does not apply is absent from the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from .values import from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class RankFacts:
    """What one rank reports of itself: its framework import's seconds, the seconds from the launch to the import's
    end, its host, its cores, and the udocker mode that ran it (None outside udocker)."""

    import_seconds: float
    launch_to_import: float
    hostname: str
    cpus: List[int]
    execmode: Optional[str]


@dataclass(frozen=True)
class AllreduceTime:
    """One message size of the allreduce sweep: the slowest rank's mean seconds over ``iterations`` and the bus
    bandwidth that gives."""

    size_bytes: int
    seconds: float
    iterations: int
    bus_bandwidth_bytes_per_second: float


@dataclass(frozen=True)
class TcpStream:
    """The raw TCP stream from rank 0 to the last rank on the ranks' interface: bytes, the slower side's seconds."""

    JSON_KEYS: ClassVar[Dict[str, str]] = {"sender": "from", "receiver": "to"}
    bytes: int
    seconds: float
    bytes_per_second: float
    sender: str
    receiver: str
    address: List[Any]


@dataclass(frozen=True)
class BenchmarkResult:
    """Rank 0's result of one measurement: what ran (kind, ranks, threads, versions, GPUs), the ranks' start, and a
    model's timing or the allreduce sweep's times."""

    ABSENT_WHEN_NONE: ClassVar[Tuple[str, ...]] = (
        "tensorflow", "torch", "distributed", "allreduce", "tcp", "measured_seconds", "steps", "samples_per_second",
        "parameters", "batch_size", "warmup_steps", "seconds_to_first_step")
    rank: int
    kind: str
    ranks: int
    threads: int
    gpus: int
    python: str
    horovod: str
    import_seconds: float
    """The slowest rank's framework import."""
    launch_to_import_seconds: float
    """The slowest rank's seconds from the launch to its import's end."""
    per_rank: List[RankFacts]
    tensorflow: Optional[str] = None
    torch: Optional[str] = None
    distributed: Optional[str] = None
    """PyTorch's distributed mode (``horovod`` or ``ddp``); absent with TensorFlow."""
    allreduce: Optional[List[AllreduceTime]] = None
    tcp: Optional[TcpStream] = None
    measured_seconds: Optional[float] = None
    steps: Optional[int] = None
    """The timed steps (after the warm-up; more where the first window was shorter than ``--min-seconds``)."""
    samples_per_second: Optional[float] = None
    parameters: Optional[int] = None
    batch_size: Optional[int] = None
    warmup_steps: Optional[int] = None
    seconds_to_first_step: Optional[float] = None
    """The slowest rank's seconds from the launch to its first step's end."""

    def write(self, path: str) -> None:
        """Write the result atomically (indented, key-sorted JSON)."""
        write_object(str(path), to_json(self))

    @classmethod
    def read(cls, path: str) -> "BenchmarkResult":
        """The result in ``path``; WireError naming the file and what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))
