"""What tells a PyTorch rank's step timers how long a step waited for the other ranks: gradient hooks that say when
the rank's last gradient was computed (what backward took after it was DDP's wait for its last buckets, or Horovod's
for its last allreduces to start), and, in a user's own loop, the optimizer's ``step`` and Horovod's
``synchronize`` timed where the script calls them (:class:`hvdflow_trainer.step_times.ScriptSteps`)."""

from __future__ import annotations

import time
import types
from typing import Any

import torch

from ..step_times import ScriptSteps


class GradientClock:
    """When ``model``'s last gradient of the current backward pass was computed (:attr:`last`, ``perf_counter``
    seconds); the gradients themselves are unchanged."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.last = 0.0
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.register_hook(self._ready)

    def _ready(self, gradient: torch.Tensor) -> None:
        self.last = time.perf_counter()


def time_optimizer(optimizer: Any, gradients: GradientClock, steps: ScriptSteps) -> None:
    """``optimizer`` (as :meth:`Ranks.wrap` returned it) tells ``steps`` what each of its ``step()`` calls waited for
    the other ranks: from the last gradient to the call (DDP's last buckets), and Horovod's ``synchronize`` (called
    by its ``step`` or by the script). Bound on this instance only; its state and checkpoints are untouched."""
    # bound methods, as the originals are: torch's LR schedulers wrap ``optimizer.step.__func__``
    stepped = optimizer.step

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        steps.add_communication(time.perf_counter() - gradients.last)
        return stepped(*args, **kwargs)

    optimizer.step = types.MethodType(step, optimizer)
    synchronize = getattr(optimizer, "synchronize", None)
    if synchronize is not None:  # Horovod's DistributedOptimizer

        def timed_synchronize(self: Any) -> Any:
            begun = time.perf_counter()
            try:
                return synchronize()
            finally:
                steps.add_communication(time.perf_counter() - begun)

        optimizer.synchronize = types.MethodType(timed_synchronize, optimizer)
