"""The Keras callbacks of a rank's step loop: run control (the agreed stop, checkpoints, history, progress; see
:mod:`hvdflow_trainer.run_control`), the resumable warm-up, BatchNorm statistics averaged over the ranks, the epoch
timer, and a test's injected failure (:mod:`hvdflow_trainer.faults`)."""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

from ..faults import InjectedFault
from ..run_control import Position, StopFlag, StopRequested, checkpoint_due, progress_line, stop_reason
from .checkpoints import floating_non_trainable


def metric_variables(model) -> list:  # type: ignore[no-untyped-def,type-arg]
    """The variables of the model's training metrics (their running sums and counts), in a fixed order."""
    return [var for metric in model.metrics for var in metric.variables]


def agree(value: int, name: str) -> int:
    """The largest of the ranks' ``value`` (an allreduce: all ranks call it)."""
    return int(hvd_tf.allreduce(tf.constant(value, tf.int32), op=hvd_tf.Max, name=name).numpy())


class RunControl:
    """One rank's run control over one layout: saves (history, position, metric sums) and the agreed stop.

    ``checkpoints`` is this rank's :class:`~hvdflow_trainer.keras.checkpoints.RunCheckpoints` (every rank saves
    through it: rank 0 writes the manifest, the others their own state where the ranks' states differ, else nothing);
    ``position`` is advanced in place by :class:`ControlCallback`.
    """

    def __init__(self, model, flag: StopFlag, rank: int, checkpoints, position: Position,  # type: ignore[no-untyped-def]
                 steps_per_epoch: int, epochs: int, checkpoint_every: int, history: List[Dict[str, float]]) -> None:
        self.model, self.flag, self.rank, self.checkpoints, self.position = model, flag, rank, checkpoints, position
        self.steps_per_epoch, self.epochs, self.checkpoint_every = steps_per_epoch, epochs, checkpoint_every
        self.history = history
        self.extra_state: Dict[str, object] = {}

    def save(self, reason: str, sums: Optional[List[List[float]]] = None) -> None:
        """A checkpoint at the current position (every rank calls it)."""
        state: Dict[str, object] = {"history": self.history, **self.extra_state}
        if sums is not None:
            state["metric_sums"] = sums
        self.checkpoints.save(self.position.epoch, self.position.step, self.steps_per_epoch, state, reason)

    def gathered_sums(self) -> List[List[float]]:
        """Every rank's metric sums (an allgather: all ranks call it)."""
        mine = tf.concat([tf.reshape(tf.cast(var, tf.float64), [-1]) for var in metric_variables(self.model)], 0)
        every = hvd_tf.allgather(tf.reshape(mine, [1, -1]), name="hvdflow_metric_sums").numpy()
        return [[float(x) for x in row] for row in every]

    def stop(self) -> None:
        """Save (with the metric sums mid-epoch), wait until it is on disk, and raise StopRequested."""
        if self.flag.unix is not None:
            self.extra_state["signal_unix"] = self.flag.unix  # this rank's signal time, for the benchmark's signal-to-disk
        self.save(stop_reason(self.flag), self.gathered_sums() if self.position.step else None)
        agree(0, "hvdflow_saved")  # nobody exits before rank 0's checkpoint is on disk
        raise StopRequested("stopped at epoch %d step %d on %s"
                            % (self.position.epoch, self.position.step, stop_reason(self.flag)))


class CarriedSums(tf.keras.callbacks.Callback):
    """First in the list: adds a resumed epoch's carried sums to its metrics after its first step.

    ``a + b`` is exact in either order, so after the first step the sums equal the uninterrupted run's, and every
    later step adds to them in the same order. The logs of that first step were computed before the addition, so
    in the resumed epoch the training results are taken from the metrics after each step and put into the
    epoch's logs (before Horovod averages them over the ranks).
    """

    def __init__(self, carried: Optional[List[float]]) -> None:
        super().__init__()
        self.carried = carried
        self.in_resumed_epoch = carried is not None
        self.results: Dict[str, float] = {}

    def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
        if self.carried is not None:
            variables = metric_variables(self.model)
            if sum(int(np.prod(var.shape)) for var in variables) != len(self.carried):
                raise RuntimeError("the checkpoint carries %d metric sums, the model's metrics have other shapes"
                                   % len(self.carried))
            offset = 0
            for var in variables:
                size = int(np.prod(var.shape))
                saved = np.array(self.carried[offset:offset + size], dtype=var.dtype.as_numpy_dtype)
                var.assign_add(saved.reshape(var.shape))
                offset += size
            self.carried = None
        if self.in_resumed_epoch:
            self.results = {metric.name: float(metric.result()) for metric in self.model.metrics}

    def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        if logs is not None and self.in_resumed_epoch:
            logs.update(self.results)
        self.in_resumed_epoch = False


class ControlCallback(tf.keras.callbacks.Callback):
    """Last in the list: after Horovod's callbacks have averaged the metrics and restored the momentum."""

    def __init__(self, control: RunControl) -> None:
        super().__init__()
        self.control = control
        self.stop_at_epoch_end = False
        self.offset = control.position.step
        self.started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
        control, position = self.control, self.control.position
        position.step = self.offset + batch + 1
        if agree(1 if control.flag.signal else 0, "hvdflow_stop"):
            if position.step < control.steps_per_epoch:
                control.stop()
            self.stop_at_epoch_end = True

    def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        control, position = self.control, self.control.position
        seconds = time.perf_counter() - self.started
        row = {key: float(value) for key, value in sorted((logs or {}).items())}
        control.history.append(row)
        position.epoch, position.step, self.offset = epoch + 1, 0, 0
        if control.rank == 0:
            print(progress_line(position.epoch, control.epochs, row, seconds), flush=True)
        if self.stop_at_epoch_end and position.epoch < control.epochs:
            control.stop()
        if checkpoint_due(position.epoch, control.epochs, control.checkpoint_every):
            control.save("epoch end")


def run_control_callbacks(model, flag: StopFlag, rank: int, checkpoints, position: Position, steps_per_epoch: int,  # type: ignore[no-untyped-def]
                          epochs: int, checkpoint_every: int, history: List[Dict[str, float]],
                          carried_sums: Optional[List[List[float]]]) -> Tuple[CarriedSums, ControlCallback]:
    """``(first, last)``: the callbacks to put first and last in ``fit``'s list (see :mod:`..run_control`).

    ``carried_sums`` are every rank's metric sums of a half-done epoch being resumed (one list of numbers per rank,
    :func:`metric_variables` flattened).
    """
    control = RunControl(model, flag, rank, checkpoints, position, steps_per_epoch, epochs, checkpoint_every, history)
    return CarriedSums(carried_sums[rank] if carried_sums is not None else None), ControlCallback(control)


class AverageStatistics(tf.keras.callbacks.Callback):
    """Averages the floating non-trainable weights (BatchNorm's moving mean and variance) over the ranks after the
    last step of every epoch, before its validation.

    Horovod averages gradients only, so each rank's BatchNorm statistics follow its own share of the data and the
    ranks would end with different models; averaging them keeps the ranks identical (and, with tensor fusion off,
    reproducible), and the epoch's validation and checkpoint see that one model. ``position`` is the run's (advanced
    by the control callback after this one); a checkpoint taken mid-epoch holds every rank's own values
    (:class:`~hvdflow_trainer.keras.checkpoints.RankStatistics`), so a resumed epoch averages what the uninterrupted
    one would.
    """

    def __init__(self, position: Position, steps_per_epoch: int) -> None:
        super().__init__()
        self.position, self.steps_per_epoch = position, steps_per_epoch

    def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
        if self.position.step + 1 == self.steps_per_epoch:
            average_over_ranks(floating_non_trainable(self.model))


def average_over_ranks(weights: list) -> None:  # type: ignore[type-arg]
    """Each of ``weights`` set to its average over the ranks (one allreduce each, in order; all ranks call it)."""
    for i, weight in enumerate(weights):
        weight.assign(hvd_tf.allreduce(weight.value(), op=hvd_tf.Average, name="non_trainable_%d" % i))


class EpochTimer(tf.keras.callbacks.Callback):
    """Wall time of every epoch, and when the first training step began, measured on each rank."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: List[float] = []
        self.first_step_unix: Optional[float] = None
        self.start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        self.start = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
        if self.first_step_unix is None:
            self.first_step_unix = time.time()

    def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        self.seconds.append(time.perf_counter() - self.start)


class ResumableWarmup(hvd.callbacks.LearningRateWarmupCallback):  # type: ignore[misc]
    """Horovod's learning-rate warm-up, told how many steps of the current epoch were done before a resume.

    Horovod computes the rate from the batch index, which restarts at 0 in a resumed epoch; ``offset`` (set by the
    training loop) adds the steps already done, so every step gets the rate it would have had. The rate rises from
    ``initial_lr / size`` to ``initial_lr`` by Horovod's formula, with ``size`` the rank count the global batch is set
    for (Horovod's own reads ``hvd.size()``, which an elastic run changes).
    """

    def __init__(self, initial_lr: float, warmup_epochs: int, steps_per_epoch: int, size: int) -> None:
        super().__init__(initial_lr=initial_lr, warmup_epochs=warmup_epochs, steps_per_epoch=steps_per_epoch, verbose=0)
        self.offset = 0
        self.nominal_size, self.nominal_warmup_epochs = size, warmup_epochs
        self.multiplier = self.fixed_size_multiplier

    def fixed_size_multiplier(self, epoch: float) -> float:
        """Horovod's multiplier, with the size fixed."""
        size = self.nominal_size
        epoch += 1. / self.steps_per_epoch
        return 1. / size * (epoch * (size - 1) / self.nominal_warmup_epochs + 1)

    def on_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
        super().on_batch_begin(batch + self.offset, logs)


class InjectedFailureCallback(tf.keras.callbacks.Callback):
    """A test's injected failure (:class:`~hvdflow_trainer.faults.InjectedFailure`) as a Keras callback, put just
    before the run's control callback."""

    def __init__(self, failure: InjectedFault, rank: int, position: Position) -> None:
        super().__init__()
        self.failure, self.rank, self.position = failure, rank, position

    def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
        # the control callback, after this one, counts this step
        self.failure.after_step(self.rank, self.position.epoch, self.position.step + 1)

    def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        self.failure.after_epoch(self.rank, epoch)
