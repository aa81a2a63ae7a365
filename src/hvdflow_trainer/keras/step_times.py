"""Where a Keras rank's steps spend their time, measured inside the compiled step.

``fit`` runs each step as one call of a compiled function (the next batch, then ``train_step``), so Python's clocks
see only the whole step. Marks are placed in the compiled step, each after the tensors it waits on by control
dependencies: when the batch is in hand (the start of ``train_step``), when the rank's last gradient is computed (the
input of Horovod's allreduce, or of the neighbour strategy's exchange), and when the step's update is done (the
weights read after it). The exchange's own end cannot be marked: Horovod's allreduce is a stateless function call
whose outputs a mark would see before the other ranks have sent theirs, so what a step waits for the others is timed
from its last gradient to its updated weights, the update (local, and short beside an exchange) included. A mark is
a ``tf.numpy_function`` that reads Python's clock (``tf.timestamp`` is refused under op determinism); nothing it does
reaches a tensor, the model, its optimizer or its checkpoints. :class:`StepTimes` reads the marks after each step.

A mark costs tens of microseconds, a large share of a millisecond's step. So the step is compiled twice, with the
marks and without (Keras' ``make_train_function``; the Python that places the marks runs only while a function is
traced), and ``fit`` is handed the marked one for every ``every``-th step only (it looks up ``model.train_function``
at each step), ``every`` chosen after each epoch so that the marks cost at most :data:`MARKS_BUDGET` of its steps'
time (every step of a model whose steps take 40 ms or more). A step during which TensorFlow traced a step function
(the first of each, and a last short batch's) is left out: its time is the trace's.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, List, Optional

import numpy as np
import tensorflow as tf

from ..step_times import ScriptSteps, StepClock

MARKS_SECONDS = 200e-6
"""What the three marks of a step cost together (``benchmarks/step_timing.py``: 3 numpy_function calls, about 150 us
on this 2-core machine, and the callbacks' reading)."""
MARKS_BUDGET = 0.005
"""The most of a step's time the marks may take, averaged over the steps."""


def _tensors(values: Any) -> List[Any]:
    """The dense tensors among ``values`` (gradients may be None or IndexedSlices)."""
    return [value for value in tf.nest.flatten(values, expand_composites=True)
            if isinstance(value, (tf.Tensor, tf.Variable))]


def every_for(step_seconds: float) -> int:
    """How many steps apart the marks run, for steps of ``step_seconds`` (1: every step)."""
    return max(1, math.ceil(MARKS_SECONDS / (MARKS_BUDGET * max(step_seconds, 1e-9))))


class Marks:
    """Where the compiled step calls Python's clock: only in the function traced while ``marking`` is True.

    TensorFlow runs whatever op is ready, in any order (one inter-op thread here): a mark placed after some tensors
    would run after the ops that use them just as well. So what comes after a mark is made to wait for it: the
    tensors it hands on are those tensors passed through ``tf.identity`` under a control dependency on the mark (the
    same values; the weights do not change)."""

    def __init__(self) -> None:
        self.marking = False

    def after(self, values: Any, mark: Callable[[], None]) -> Any:
        """Call ``mark`` in the marked step function once all of ``values`` are computed; ``values`` (the same
        structure) made to wait for the call."""
        if not self.marking:
            return values

        def call() -> Any:
            mark()
            return np.float64(0)

        with tf.control_dependencies(_tensors(values)):
            called = tf.numpy_function(call, [], tf.float64, stateful=True)

        def waiting(value: Any) -> Any:
            if isinstance(value, (tf.Tensor, tf.Variable)):
                with tf.control_dependencies([called]):
                    return tf.identity(value)
            return value

        return tf.nest.map_structure(waiting, values)


class Stopwatch:
    """Seconds from one mark to another in the timed steps, summed."""

    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.seconds = 0.0
        self._began = 0.0

    def begin(self) -> None:
        """Start timing (called by a mark)."""
        self._began = time.perf_counter()

    def end(self) -> None:
        """Add the seconds since :meth:`begin` (called by a mark)."""
        self.seconds += time.perf_counter() - self._began

    def begun_after(self, inputs: Any) -> Any:
        """``inputs``, made to wait for a mark that starts timing once all of them are computed."""
        return self.marks.after(inputs, self.begin)


class StepTimes(tf.keras.callbacks.Callback):
    """Splits ``fit``'s timed steps into waiting for the batch, computing and communicating (:class:`StepClock`).

    :meth:`instrument` places the marks; it must run before ``fit`` compiles the step."""

    def __init__(self, clock: StepClock) -> None:
        super().__init__()
        self.clock = clock
        self.marks = Marks()
        self.exchange = Stopwatch(self.marks)
        self.every = 1
        self._functions: dict[bool, Any] = {}
        self._timed = True
        self._count = 0
        self._in_hand = self._begun = self._exchanged = 0.0
        self._traces = self._traces_before = 0
        self._epoch_seconds, self._epoch_steps = 0.0, 0

    def instrument(self, model: Any, optimizer: Any, neighbours: Optional[Any], ranks: int) -> None:
        """Mark ``model``'s ``train_step`` and the exchange of ``optimizer`` (Horovod's DistributedOptimizer) or of
        ``neighbours`` (the neighbour strategy's averaging); with one of ``ranks`` there is no exchange to mark."""
        step = model.train_step

        def batch_in_hand() -> None:
            self._in_hand = time.time()

        def marked_step(data: Any) -> Any:
            self._traces += 1  # this line runs only while TensorFlow traces the step
            outputs = step(self.marks.after(data, batch_in_hand))
            if ranks > 1:  # the weights read after the step's update: TensorFlow orders a variable's reads after its writes
                self.marks.after([tf.identity(v) for v in model.trainable_variables], self.exchange.end)
            return outputs

        model.train_step = marked_step
        if ranks > 1 and neighbours is not None:
            neighbours.stopwatch = self.exchange
        elif ranks > 1:
            allreduce = optimizer._allreduce  # Horovod's one call that averages the gradients (horovod/_keras)

            def timed_allreduce(grads: Any, variables: Any) -> Any:
                return allreduce(self.exchange.begun_after(grads), variables)

            optimizer._allreduce = timed_allreduce
        for marked in (True, False):  # each traced at its first call, with the marks or without
            self._functions[marked] = model.make_train_function(force=True)

    def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        self.clock.start_epoch(epoch)
        if self._epoch_steps:
            self.every = every_for(self._epoch_seconds / self._epoch_steps)
        self._epoch_seconds, self._epoch_steps = 0.0, 0

    def on_train_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
        self._timed = self._count % self.every == 0
        if self.model.train_function is not self._functions[self._timed]:  # Keras' setattr costs 20 us: on change
            self.marks.marking = self._timed  # read only where this call traces the function
            self.model.train_function = self._functions[self._timed]
        self._begun, self._traces_before = time.time(), self._traces

    def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
        ended = time.time()
        self._count += 1
        traced = self._traces != self._traces_before  # a step that traced a step function: its time is the trace's
        if not traced:
            self._epoch_seconds += ended - self._begun
            self._epoch_steps += 1
        if self._timed:
            exchanged = self.exchange.seconds
            communication, self._exchanged = exchanged - self._exchanged, exchanged
            if not traced:
                self.clock.add(self._in_hand - self._begun, ended - self._in_hand - communication, communication)

    def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        self.clock.end_epoch()


def time_tape_exchange(steps: ScriptSteps) -> None:
    """Every ``hvd.DistributedGradientTape`` made from here on in this process tells ``steps`` when it hands the
    gradients to Horovod's allreduce (:meth:`ScriptSteps.exchange_begins`): by a Python call in an eager step, by a
    mark in a compiled one. The gradients and what the allreduce returns are unchanged."""
    import horovod.tensorflow as hvd_tf

    tape_class = hvd_tf._DistributedGradientTape  # what DistributedGradientTape copies into each tape's class
    made = tape_class.__init__
    marks = Marks()
    marks.marking = True

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        allreduce = self._allreduce_grads

        def timed_allreduce(grads: Any, sources: Any, *rest: Any) -> Any:
            if tf.executing_eagerly():
                steps.exchange_begins()
                return allreduce(grads, sources, *rest)
            return allreduce(marks.after(grads, steps.exchange_begins), sources, *rest)

        self._allreduce_grads = timed_allreduce

    tape_class.__init__ = __init__
