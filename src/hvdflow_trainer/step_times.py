"""Where a rank's training steps spend their time, for every framework's loop: each step's seconds split into waiting
for input, computing and communicating (:class:`hvdflow_wire.steps.EpochSteps`), summed per epoch.

The loops measure with their own timers (:mod:`.keras.step_times` inside the compiled step, the PyTorch loop around
its calls, :class:`ScriptSteps` around a user's own loop) and hand each step's three figures to a
:class:`StepClock`. Only clocks are read: no tensor depends on them, so the weights are those of an unmeasured run.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator, List, Optional, TypeVar

from hvdflow_wire.steps import EpochSteps

T = TypeVar("T")


class StepClock:
    """One rank's step times, epoch by epoch."""

    def __init__(self) -> None:
        self.epochs: List[EpochSteps] = []
        self._epoch: Optional[int] = None
        self._sums = [0.0, 0.0, 0.0]
        self._steps = 0

    def start_epoch(self, epoch: int) -> None:
        """Steps from here on belong to ``epoch`` (an epoch started again, as after an elastic reset, adds to what
        it had)."""
        self.end_epoch()
        self._epoch = epoch

    def add(self, input_seconds: float, compute_seconds: float, communication_seconds: float) -> None:
        """One step's seconds (a clock's jitter that makes one negative counts as 0)."""
        for k, seconds in enumerate((input_seconds, compute_seconds, communication_seconds)):
            self._sums[k] += max(seconds, 0.0)
        self._steps += 1

    def end_epoch(self) -> None:
        """Close the current epoch (nothing if it took no step)."""
        if self._epoch is not None and self._steps:
            sums = [round(s, 6) for s in self._sums]
            last = self.epochs[-1] if self.epochs and self.epochs[-1].epoch == self._epoch else None
            if last is not None:
                self.epochs.pop()
                sums = [round(a + b, 6) for a, b in zip(sums, (last.input_seconds, last.compute_seconds,
                                                             last.communication_seconds))]
            self.epochs.append(EpochSteps(self._epoch, self._steps + (last.steps if last else 0), *sums))
        self._epoch, self._sums, self._steps = None, [0.0, 0.0, 0.0], 0

    def result(self) -> List[EpochSteps]:
        """Every epoch's figures (the current one closed)."""
        self.end_epoch()
        return list(self.epochs)


def timed_input(batches: Iterable[T], waited: List[float]) -> Iterator[T]:
    """``batches``, with the seconds spent waiting for each put in ``waited[0]`` before it is yielded."""
    iterator = iter(batches)
    while True:
        start = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        waited[0] = time.perf_counter() - start
        yield batch


class ScriptSteps:
    """Times a user's own loop (the script API) from the batches it is handed: the wait for each batch is input,
    what the loop does until it asks for the next one is the step, less the time of hvdflow's own calls it makes
    between steps (:meth:`between`, the agreed stop). The framework's hooks say what of the step was communication:
    :meth:`add_communication` (PyTorch: DDP's last buckets, Horovod's ``synchronize``) or :meth:`exchange_begins`
    (TensorFlow: the last gradient handed to Horovod's allreduce; from then to the step's end)."""

    def __init__(self, clock: StepClock) -> None:
        self.clock = clock
        self._communication = self._between = 0.0
        self._exchange_began: Optional[float] = None

    def batches(self, batches: Iterable[T]) -> Iterator[T]:
        """``batches``, each step between two of them timed into the clock (a step the loop leaves, as at a stop,
        is not)."""
        waited = [0.0]
        for batch in timed_input(batches, waited):
            in_hand = time.perf_counter()
            self._communication = self._between = 0.0
            self._exchange_began = None
            yield batch
            ended = time.perf_counter() - self._between
            communication = self._communication
            if self._exchange_began is not None:
                communication += max(ended - self._exchange_began, 0.0)
            self.clock.add(waited[0], ended - in_hand - communication, communication)

    def add_communication(self, seconds: float) -> None:
        """``seconds`` of this step spent waiting for the other ranks."""
        self._communication += seconds

    def exchange_begins(self) -> None:
        """The step's exchange begins now; it and what follows it in the step count as communication."""
        self._exchange_began = time.perf_counter()

    def between(self, seconds: float) -> None:
        """``seconds`` of hvdflow's own calls made after this step (left out of it)."""
        self._between += seconds
