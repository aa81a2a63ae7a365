"""What a finished run leaves beside its model, whatever framework trained it: the weights' hash, ``history.csv``,
``metrics.json`` and the common part of every rank's result."""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import sys
from typing import Any, Dict, List

from hvdflow_wire.metrics import TrainingMetrics
from hvdflow_wire.rank import RankResult
from hvdflow_wire.replace import replaced

from .machine import cpu_facts, nvidia_driver
from .options import TrainOptions
from .run_control import Position
from .usage import finish_sampling


def weights_sha256(weights: list) -> str:  # type: ignore[type-arg]
    """sha256 over the bytes of a model's weight arrays, in order."""
    sha = hashlib.sha256()
    for array in weights:
        sha.update(array.tobytes())
    return sha.hexdigest()


def rank_result(args: TrainOptions, position: Position, start: Position, layout: Any, gpus: List[Dict[str, object]],
                **framework: Any) -> RankResult:
    """This rank's result: what every framework's rank knows alike (host, CPUs, threads, machine, the run's position
    and layout, Python's version) and ``framework``'s own fields (placement, controller, numerics, weights, timings,
    versions). ``layout`` has ``train_per_rank``, ``steps_per_epoch`` and ``sharding``."""
    return RankResult(
        hostname=socket.gethostname(), strategy=args.strategy, threads=args.threads,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), cpus=sorted(os.sched_getaffinity(0)),
        elastic_worker=os.environ.get("HVDFLOW_ELASTIC_WORKER"), horovod_hostname=os.environ.get("HOROVOD_HOSTNAME"),
        machine={"cpu": cpu_facts(), "gpus": gpus, "nvidia_driver": nvidia_driver()},
        epochs_done=position.epoch, resumed_from={"epoch": start.epoch, "step": start.step},
        train_records_per_rank=layout.train_per_rank, steps_per_epoch=layout.steps_per_epoch,
        input_sharding=layout.sharding, python="%d.%d.%d" % tuple(sys.version_info[:3]),
        execmode=os.environ.get("HVDFLOW_UDOCKER_MODE"), usage=finish_sampling(), **framework)


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
