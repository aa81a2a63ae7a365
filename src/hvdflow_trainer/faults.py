"""Fault injection for tests, the trainer's side: one rank fails on purpose at a given position, every step is
slowed down, or every batch is slow to come.

The host passes the test's request (``HVDFLOW_INJECT_RANK_FAILURE``, see :mod:`hvdflow.launch.faults`) as hidden
options (:meth:`hvdflow_trainer.options.TrainOptions.parser` declares them); :func:`injected_failures` is the one
call the step loop makes: an empty list unless a test asked for a failure. A slow input is the loops' data wrapped
(:func:`slowed_batches`, Keras' ``keras.data.slowed``). Nothing else in the trainer knows about them.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterable, Iterator, List, TypeVar, Union

from .options import TrainOptions

HOW = ("exit", "exit0", "kill", "signal")
MARKER = ".injected-failure"
"""The file (in the run's checkpoint folder) that the first failure injected ``once`` writes before failing (the
n-th of several: ``MARKER-<n>``)."""


class InjectedFailure:
    """One rank fails at a given position, after a step or at an epoch's end.

    ``how`` is ``exit`` (status 3), ``exit0`` (status 0, as a rank whose error an elastic wrapper swallowed),
    ``kill`` (SIGKILL) or ``signal`` (SIGUSR1 to itself, as Slurm's warning before a
    time limit: the ranks then stop after that step and rank 0 saves). With a ``marker`` file it fails only once: the
    marker is written first, and a later attempt that finds it trains on.
    """

    HOW = HOW

    def __init__(self, rank: int, epoch: int, step: int, how: str, marker: str) -> None:
        if how not in self.HOW:
            raise ValueError("injected failure: %r is not one of %s" % (how, ", ".join(self.HOW)))
        self.rank, self.epoch, self.step, self.how, self.marker = rank, epoch, step, how, marker

    def fail(self, rank: int, where: str) -> None:
        """Fail now as told (unless the marker says it already did)."""
        if self.marker:
            if os.path.exists(self.marker):
                return
            with open(self.marker, "w") as handle:
                handle.write(where + "\n")
        print("rank %d: failing on purpose (%s) %s" % (rank, self.how, where), flush=True)
        if self.how == "signal":
            # raise(), not kill(): delivered to this (the main) thread before it returns, so the flag is set before
            # this step's agreement. kill() may hand it to one of TensorFlow's threads, and the stop comes a step later
            signal.raise_signal(signal.SIGUSR1)
            return
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0 if self.how == "exit0" else 3)

    def after_step(self, rank: int, epochs_done: int, steps_done: int) -> None:
        """Called after every step (before the run's control counts it): fail if ``rank`` is at the position."""
        if rank == self.rank and self.step and epochs_done + 1 == self.epoch and steps_done == self.step:
            self.fail(rank, "at step %d of epoch %d" % (self.step, self.epoch))

    def after_epoch(self, rank: int, epoch: int) -> None:
        """Called at the end of epoch ``epoch`` (from 0): fail if ``rank`` is to fail after it."""
        if rank == self.rank and not self.step and epoch + 1 == self.epoch:
            self.fail(rank, "after epoch %d" % self.epoch)


class SlowSteps:
    """Every rank sleeps ``seconds`` after each step: a run that outlasts a Slurm time limit on any machine, loaded
    or idle (the sleep, not the machine's speed, sets how long it takes), with the weights of an unslowed run."""

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("slow steps: %r seconds is negative" % seconds)
        self.seconds = seconds

    def after_step(self, rank: int, epochs_done: int, steps_done: int) -> None:
        """Called after every step: sleep."""
        time.sleep(self.seconds)

    def after_epoch(self, rank: int, epoch: int) -> None:
        """Called at the end of an epoch: nothing more."""


T = TypeVar("T")


def slowed_batches(batches: Iterable[T], seconds: float) -> Iterator[T]:
    """``batches``, each after ``seconds`` of sleep (``--slow-input``: an input pipeline that cannot keep up)."""
    for batch in batches:
        time.sleep(seconds)
        yield batch


InjectedFault = Union[InjectedFailure, SlowSteps]
"""What the training loops call after each step and epoch."""


def injected_failures(args: TrainOptions) -> List[InjectedFault]:
    """The failures a test asked for with the hidden options (each option once per failure, in the same order;
    ``--fail-once`` said for all of them or none), and the slowed steps of ``--slow-steps``: none by default."""
    failures: List[InjectedFault] = [SlowSteps(args.slow_steps)] if args.slow_steps else []
    for n, (rank, epoch, step, how) in enumerate(zip(args.fail_rank, args.fail_epoch, args.fail_step, args.fail_how)):
        marker = os.path.join(args.checkpoint_dir, MARKER + ("-%d" % n if n else "")) if args.fail_once else ""
        failures.append(InjectedFailure(rank, epoch, step, how, marker))
    return failures
