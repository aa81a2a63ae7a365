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

This module holds what any framework's step loop shares (the flag, the position, the stop's reason, the progress
line, when to checkpoint); the Keras callbacks that do the above after every step are
:mod:`hvdflow_trainer.keras.callbacks`.
"""

from __future__ import annotations

import signal
import time
from typing import Dict, Optional

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

    def ignore(self) -> None:
        """Ignore the stop signals from now on: the run has ended (finished, or stopped after its checkpoint).

        The interpreter's exit puts Python's handlers back to the default action, and a Ctrl-C repeated by the
        launcher or the scheduler's SIGTERM in the seconds of teardown (Horovod's shutdown, TensorFlow's) then
        killed the rank: its status 75 became 130 (seen in the suite, with udocker's wrapper reporting it; before the
        wrapper, proot said 0). An ignored signal stays ignored through the exit.
        """
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is None:
            self.signal, self.unix = signum, time.time()


class Position:
    """Where training stands: ``epoch`` epochs done and ``step`` steps into the next."""

    def __init__(self, epoch: int, step: int) -> None:
        self.epoch, self.step = epoch, step


def stop_reason(flag: StopFlag) -> str:
    """Why the ranks stop: this rank's signal, or another rank's."""
    return "signal %s" % signal.Signals(flag.signal).name if flag.signal else "signal on another rank"


def progress_line(epochs_done: int, epochs: int, row: Dict[str, float], seconds: float) -> str:
    """Rank 0's line after each epoch: ``hvdflow: epoch 3/10: loss ... (2.1 s, ETA 15 s)``."""
    metrics = " ".join("%s %.4g" % (k, v) for k, v in row.items())
    eta = seconds * (epochs - epochs_done)
    return "hvdflow: epoch %d/%d: %s (%.1f s, ETA %.0f s)" % (epochs_done, epochs, metrics, seconds, eta)


def checkpoint_due(epochs_done: int, epochs: int, checkpoint_every: int) -> bool:
    """Whether the end of the epoch that brings the run to ``epochs_done`` saves a checkpoint."""
    return epochs_done % checkpoint_every == 0 or epochs_done == epochs
