"""What keeps a run resumable while it trains: a stop on a signal agreed by all ranks, checkpoints, history, progress.

- A signal (TERM, USR1, INT) only sets a flag. After every step the ranks combine their flags with a max-allreduce,
  so all of them stop after the same step; rank 0 saves a checkpoint (in neighbour training every rank its own
  state), the ranks meet once more (so none leaves before it is on disk) and each raises :class:`StopRequested`;
  the process then exits with :data:`hvdflow_runstate.STOPPED_EXIT`. A stop agreed on an epoch's last step waits
  for that epoch's end.
- Every ``checkpoint_every`` epochs, and after the last, rank 0 saves at the epoch's end.
- The history is kept here, one row per epoch, and goes into every checkpoint; rank 0 prints one progress line per
  epoch (``hvdflow: epoch 3/10: loss ... (2.1 s, ETA 15 s)``), which the launcher copies into the rule's log.
- An epoch stopped half-way keeps every rank's running metric sums in the checkpoint; the resumed epoch adds each
  rank's own back after its first step, so its history row is the one the uninterrupted epoch would have had.
"""

from __future__ import annotations

import signal
import time
from typing import Dict, List, Optional

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class StopRequested(Exception):
    """The ranks agreed to stop on a signal; rank 0 saved a checkpoint."""


class StopFlag:
    """Set by the first of :data:`STOP_SIGNALS`; nothing else happens in the handler."""

    def __init__(self) -> None:
        self.signal: Optional[int] = None
        self.unix: Optional[float] = None

    def install(self) -> None:
        """Handle the stop signals in this (the main) thread."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is None:
            self.signal, self.unix = signum, time.time()


class Position:
    """Where training stands: ``epoch`` epochs done and ``step`` steps into the next."""

    def __init__(self, epoch: int, step: int) -> None:
        self.epoch, self.step = epoch, step


def metric_variables(model) -> list:  # type: ignore[no-untyped-def,type-arg]
    """The variables of the model's training metrics (their running sums and counts), in a fixed order."""
    return [var for metric in model.metrics for var in metric.variables]


def run_control_callbacks(model, flag: StopFlag, rank: int, checkpoints, position: Position, steps_per_epoch: int,  # type: ignore[no-untyped-def]
                          epochs: int, checkpoint_every: int, history: List[Dict[str, float]],
                          carried_sums: Optional[List[List[float]]]):
    """``(first, last)``: the callbacks to put first and last in ``fit``'s list (see the module's docstring).

    ``checkpoints`` is this rank's :class:`~hvdflow_trainer.checkpoints.RunCheckpoints` (every rank saves through
    it: rank 0 writes the manifest, the others their own state where the ranks' states differ, else nothing);
    ``position`` is advanced in place; ``carried_sums`` are every rank's metric sums of a half-done epoch being resumed
    (one list of numbers per rank, :func:`metric_variables` flattened).
    """
    import horovod.tensorflow as hvd_tf
    import numpy as np
    import tensorflow as tf

    def agree(value: int, name: str) -> int:
        return int(hvd_tf.allreduce(tf.constant(value, tf.int32), op=hvd_tf.Max, name=name).numpy())

    def stop_reason() -> str:
        return "signal %s" % signal.Signals(flag.signal).name if flag.signal else "signal on another rank"

    extra_state: Dict[str, object] = {}

    def save(reason: str, sums: Optional[List[List[float]]] = None) -> None:
        state: Dict[str, object] = {"history": history, **extra_state}
        if sums is not None:
            state["metric_sums"] = sums
        checkpoints.save(position.epoch, position.step, steps_per_epoch, state, reason)

    def gathered_sums() -> List[List[float]]:
        """Every rank's metric sums (an allgather: all ranks call it)."""
        mine = tf.concat([tf.reshape(tf.cast(var, tf.float64), [-1]) for var in metric_variables(model)], 0)
        every = hvd_tf.allgather(tf.reshape(mine, [1, -1]), name="hvdflow_metric_sums").numpy()
        return [[float(x) for x in row] for row in every]

    def stop() -> None:
        if flag.unix is not None:
            extra_state["signal_unix"] = flag.unix  # this rank's signal time, for the benchmark's signal-to-disk
        save(stop_reason(), gathered_sums() if position.step else None)
        agree(0, "hvdflow_saved")  # nobody exits before rank 0's checkpoint is on disk
        raise StopRequested("stopped at epoch %d step %d on %s" % (position.epoch, position.step, stop_reason()))

    class _Sums(tf.keras.callbacks.Callback):
        """First in the list: adds a resumed epoch's carried sums to its metrics after its first step.

        ``a + b`` is exact in either order, so after the first step the sums equal the uninterrupted run's, and every
        later step adds to them in the same order. The logs of that first step were computed before the addition, so
        in the resumed epoch the training results are taken from the metrics after each step and put into the
        epoch's logs (before Horovod averages them over the ranks).
        """

        def __init__(self) -> None:
            super().__init__()
            self.carried = carried_sums[rank] if carried_sums is not None else None
            self.in_resumed_epoch = carried_sums is not None
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

    class _Control(tf.keras.callbacks.Callback):
        """Last in the list: after Horovod's callbacks have averaged the metrics and restored the momentum."""

        def __init__(self) -> None:
            super().__init__()
            self.stop_at_epoch_end = False
            self.offset = position.step
            self.started = time.perf_counter()

        def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
            position.step = self.offset + batch + 1
            if agree(1 if flag.signal else 0, "hvdflow_stop"):
                if position.step < steps_per_epoch:
                    stop()
                self.stop_at_epoch_end = True

        def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
            seconds = time.perf_counter() - self.started
            row = {key: float(value) for key, value in sorted((logs or {}).items())}
            history.append(row)
            position.epoch, position.step, self.offset = epoch + 1, 0, 0
            if rank == 0:
                metrics = " ".join("%s %.4g" % (k, v) for k, v in row.items())
                eta = seconds * (epochs - position.epoch)
                print("hvdflow: epoch %d/%d: %s (%.1f s, ETA %.0f s)" % (position.epoch, epochs, metrics, seconds, eta),
                      flush=True)
            if self.stop_at_epoch_end and position.epoch < epochs:
                stop()
            if position.epoch % checkpoint_every == 0 or position.epoch == epochs:
                save("epoch end")

    return _Sums(), _Control()
