"""What a Keras rank leaves when its run is done: rank 0's model, history, TensorBoard logs and metrics, and every
rank's result (``rank-<r>.json``)."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import horovod
import horovod.tensorflow.keras as hvd
import tensorflow as tf

from hvdflow_wire.steps import EpochSteps

from ..machine import gpu_facts, numerics
from ..options import TrainOptions
from ..outputs import rank_result, weights_sha256, write_history, write_metrics
from ..run_control import Position
from .callbacks import EpochTimer


def write_tensorboard(folder: str, history: List[Dict[str, float]], first_epoch: int) -> None:
    """Epoch scalars (``epoch_<metric>``) under ``train/`` and ``validation/``, as Keras' TensorBoard callback names them."""
    writers = {"train": tf.summary.create_file_writer(os.path.join(folder, "train")),
               "validation": tf.summary.create_file_writer(os.path.join(folder, "validation"))}
    for epoch in range(first_epoch, len(history)):
        for key, value in history[epoch].items():
            split, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            with writers[split].as_default():
                tf.summary.scalar("epoch_" + name, value, step=epoch)
    for writer in writers.values():
        writer.close()


def write_run_outputs(out: str, model, history: List[Dict[str, float]], epochs: int, timer: EpochTimer,  # type: ignore[no-untyped-def]
                      steps_per_epoch: int) -> None:
    """Rank 0's outputs: ``model/model.keras``, ``history.csv``, ``tensorboard/`` and ``metrics.json``."""
    # an uncompiled copy: the saved model must not depend on Horovod's optimizer wrapper to load
    plain = tf.keras.models.clone_model(model)
    plain.set_weights(model.get_weights())
    os.makedirs(os.path.join(out, "model"), exist_ok=True)
    plain.save(os.path.join(out, "model", "model.keras"))
    write_history(os.path.join(out, "history.csv"), history)
    write_tensorboard(os.path.join(out, "tensorboard"), history, 0)
    write_metrics(os.path.join(out, "metrics.json"), history, epochs, timer.seconds, steps_per_epoch)


def write_rank_result(args: TrainOptions, model, topology: Optional[str], position: Position,  # type: ignore[no-untyped-def]
                      start: Position, timer: EpochTimer, layout, step_times: Optional[List[EpochSteps]] = None) -> None:
    """This rank's ``rank-<r>.json`` in ``args.out``: placement, versions, the sha256 of its final weights, and how
    its run went. ``topology``: the neighbour strategy's graph (None for allreduce); ``step_times``: where its steps
    spent their time (None: not measured)."""
    result = rank_result(
        args, position, start, layout, gpu_facts(tf, tf.config.get_visible_devices("GPU")),
        rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
        cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(),
        controller="mpi" if hvd.mpi_enabled() else "gloo", topology=topology,
        numerics=numerics(tf, args.deterministic_allreduce), weights_sha256=weights_sha256(model.get_weights()),
        epoch_seconds=timer.seconds, first_step_unix=timer.first_step_unix, step_times=step_times,
        framework="tensorflow", framework_version=tf.__version__, distributed="horovod",
        tensorflow=tf.__version__, horovod=horovod.__version__,
    )
    result.write(os.path.join(args.out, "rank-%d.json" % result.rank))
