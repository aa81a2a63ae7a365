"""Where a rank's training steps spent their time, epoch by epoch (part of ``rank-<r>.json`` and of ``run.json``'s
ranks): waiting for the next batch, computing, and communicating, from the trainer's own timers
(:mod:`hvdflow_trainer.step_times`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .values import WireError


@dataclass(frozen=True)
class EpochSteps:
    """The ``steps`` one rank timed in ``epoch`` (from 0; a resumed epoch counts only the steps of this attempt, and
    Keras leaves out a step that traced its step function), their seconds summed by what the rank waited on.

    ``input_seconds``: waiting for the next batch (the input pipeline could not keep up). ``communication_seconds``:
    waiting for the other ranks once this rank's gradients were computed (PyTorch: DDP's last buckets, Horovod's
    ``synchronize``; Keras: from the last gradient to the updated weights, the short local update included; the
    neighbour exchange); a slower rank's extra work shows up here on the others.
    ``compute_seconds``: the rest of each step (forward, backward, the update). What runs between steps (callbacks,
    the agreed stop, validation, checkpoints) is in none of them: the epoch's seconds less these three.
    """

    epoch: int
    steps: int
    input_seconds: float
    compute_seconds: float
    communication_seconds: float

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.steps < 1:
            raise WireError("epoch %d with %d steps: out of range" % (self.epoch, self.steps))
        if min(self.input_seconds, self.compute_seconds, self.communication_seconds) < 0:
            raise WireError("epoch %d: a negative time" % self.epoch)

    @property
    def seconds(self) -> float:
        """The steps' seconds in all."""
        return self.input_seconds + self.compute_seconds + self.communication_seconds
