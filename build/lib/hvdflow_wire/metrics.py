"""A training's metrics (``metrics.json`` in the experiment's results): written by rank 0 of the trainer after its
last epoch, read on the host by the smoke job's summary and the benchmarks' tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

from .values import from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class TrainingMetrics:
    """The last epoch's history row (``final``: each Keras metric as a number), the epochs the run trained, every
    epoch's seconds in this attempt and the steps per epoch."""

    final: Dict[str, float]
    epochs: int
    epoch_seconds: List[float]
    steps_per_epoch: int

    def write(self, path: str) -> None:
        """Write ``metrics.json`` atomically (indented, key-sorted JSON)."""
        write_object(str(path), to_json(self))

    @classmethod
    def read(cls, path: str) -> "TrainingMetrics":
        """The metrics in ``path``; WireError naming the file and what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))
