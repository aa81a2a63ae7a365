"""What both frameworks' run objects of a user's training script share (:mod:`hvdflow_trainer.script` is the API and
the entry point; the run objects are the framework folders' ``script`` modules): the epochs still to run, and what to
say where the ranks end with different models."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple, TypeVar

from .run_control import Position
from .step_times import ScriptSteps
from .user_code import UserCodeError

T = TypeVar("T")


class ScriptEpochs:
    """What both frameworks' script runs share: the epochs still to run, each opened here and closed by their
    ``end_epoch``; a framework's run says what starts with an epoch (:meth:`_epoch_begins`). Where the run times its
    steps (``_steps``, None: not measured), the batches it hands out, its calls between steps and its epochs are
    timed here."""

    epochs: int
    _position: Position
    _epoch_open: bool
    _steps: Optional[ScriptSteps]

    def _tracked(self, call: str) -> Any:
        """The run's checkpoints; UserCodeError where ``call`` comes before ``run.track``."""
        raise NotImplementedError

    def _epoch_begins(self) -> None:
        """What the framework's run does as an epoch begins (its timer)."""
        raise NotImplementedError

    def epochs_to_run(self) -> Iterator[int]:
        """The epochs still to train, from the one the last checkpoint stopped in; ``end_epoch`` ends each."""
        self._tracked("epochs_to_run")
        while self._position.epoch < self.epochs:
            if self._epoch_open:
                raise UserCodeError("the training script went on to the next epoch without calling "
                                    "run.end_epoch(metrics) at the end of epoch %d" % (self._position.epoch + 1))
            self._epoch_open = True
            if self._steps is not None:
                self._steps.clock.start_epoch(self._position.epoch)  # closes the epoch before
            self._epoch_begins()
            yield self._position.epoch

    def _timed_batches(self, batches: Iterable[T]) -> Iterable[T]:
        """``batches``, each step between two of them timed where the run times its steps."""
        return self._steps.batches(batches) if self._steps is not None else batches

    @contextlib.contextmanager
    def _between_steps(self) -> Iterator[None]:
        """A call of hvdflow's own that the loop makes after a step (left out of the step's time)."""
        begun = time.perf_counter()
        try:
            yield
        finally:
            if self._steps is not None:
                self._steps.between(time.perf_counter() - begun)

    def _step_times(self) -> Any:
        """Where this rank's steps went, per epoch (None: not measured)."""
        return self._steps.clock.result() if self._steps is not None else None


def ranks_disagree(every_rank: Sequence[Sequence[Tuple[str, str, bool]]]) -> Optional[str]:
    """What differs between the ranks' models at the end of a script's run, or None where they are one model.

    ``every_rank`` holds each rank's ``(variable name, sha256 of its value, trainable)`` in the model's order. The
    message names the variables that differ and the likely cause: trainable weights whose gradients were not
    averaged, or state a layer keeps (BatchNorm's statistics) changed after ``run.end_epoch`` averaged it.
    """
    first = every_rank[0]
    differ = sorted({(name, trainable) for values in every_rank[1:] for (name, digest, trainable), (_, mine, _)
                     in zip(values, first) if digest != mine})
    if not differ and all(len(values) == len(first) for values in every_rank):
        return None
    trainable = [name for name, train in differ if train]
    state = [name for name, train in differ if not train]
    said = []
    if trainable:
        said.append("trainable %s: their gradients were not averaged over the ranks (wrap the tape in "
                    "hvd.DistributedGradientTape, the torch optimizer in the one run.track returns) or a rank changed "
                    "them outside the steps" % ", ".join(trainable))
    if state:
        said.append("non-trainable %s: run.validate and run.end_epoch average such state (BatchNorm's statistics) "
                    "over the ranks; it changed after that on some rank" % ", ".join(state))
    return "the ranks ended with different models: %s" % "; ".join(said or ["their variables differ in number"])
