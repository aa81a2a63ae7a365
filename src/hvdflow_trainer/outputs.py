"""What a finished run leaves beside its model, whatever framework trained it: the weights' hash, ``history.csv`` and
``metrics.json``."""

from __future__ import annotations

import csv
import hashlib
from typing import Dict, List

from hvdflow_wire.metrics import TrainingMetrics
from hvdflow_wire.replace import replaced


def weights_sha256(weights: list) -> str:  # type: ignore[type-arg]
    """sha256 over the bytes of a model's weight arrays, in order."""
    sha = hashlib.sha256()
    for array in weights:
        sha.update(array.tobytes())
    return sha.hexdigest()


def write_history(path: str, history: List[Dict[str, float]]) -> None:
    """``history.csv`` as Keras' CSVLogger writes it: ``epoch`` (from 0), then the logged values in name order."""
    keys = sorted({key for row in history for key in row})
    with replaced(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch"] + keys)
        for epoch, row in enumerate(history):
            writer.writerow([epoch] + [row.get(key, "") for key in keys])


def write_metrics(path: str, history: List[Dict[str, float]], epochs: int, epoch_seconds: List[float],
                  steps_per_epoch: int) -> None:
    """``metrics.json``: the last epoch's history row, the epoch count, every epoch's seconds and the steps per epoch."""
    TrainingMetrics(history[-1], epochs, epoch_seconds, steps_per_epoch).write(path)
