"""What hvdflow gives a user's own PyTorch training script: the run object behind :func:`hvdflow_trainer.script.start`
when the experiment's framework is pytorch.

The same calls as the TensorFlow run (:mod:`hvdflow_trainer.keras.script`), made of the PyTorch loop's parts
(:mod:`.fit`): the rank's set-up and its group in the experiment's distributed mode, the rank's share of the
prepared splits in the epoch-keyed order, the run's checkpoints under the manifest, the agreed stop and the outputs.
One difference: :meth:`ScriptRun.track` returns the module and optimizer to train with, wrapped for the distributed
mode (Horovod's ``DistributedOptimizer``, or ``DistributedDataParallel``); the model is saved as TorchScript
(traced on one batch), so evaluation needs none of the script's code.
"""

from __future__ import annotations

import hashlib
import io
import time
from typing import Any, Dict, Iterator, List, NoReturn, Optional, Tuple

import torch

from ..faults import injected_failures, slowed_batches
from ..options import TrainOptions
from ..run_control import Position, StopFlag, StopRequested, checkpoint_due, progress_line, stop_reason
from ..script_run import ScriptEpochs, ranks_disagree
from ..step_times import ScriptSteps, StepClock
from ..user_code import UserCodeError, user_model_of
from .checkpoints import RunCheckpoints
from .fit import Layout, average_buffers, read_identity, set_up_rank, validation_metrics
from .models import loss_function, tensor_shape
from .outputs import write_rank_result, write_run_outputs
from .step_hooks import GradientClock, time_optimizer

REPORTED = ("loss", "accuracy", "val_loss", "val_accuracy")
"""What every epoch's row must hold: the report's learning curves plot them."""


class ScriptRun(ScriptEpochs):
    """One rank of a user's PyTorch training script; every rank calls its methods at the same points of the loop.

    ``rank``, ``size``, ``local_rank``: the rank's place; ``distributed``: ``horovod`` or ``ddp``; ``device``: the
    rank's GPU or the CPU; ``epochs``; ``batch_size``: this rank's batch; ``learning_rate``: the experiment's, scaled
    by the rank count; ``params``: the experiment's ``model.params``; ``input_shape`` (one sample as the tensors
    arrive: ``(channels, height, width)`` for images), ``num_classes``, ``class_names``, ``multi_label``: the prepared
    dataset's; ``steps_per_epoch``: the batches :meth:`train_batches` yields in a whole epoch; ``loss``: the task's
    loss on logits (cross-entropy, or binary cross-entropy for multi-label data).
    """

    def __init__(self, args: TrainOptions, flag: StopFlag) -> None:
        self._ranks = set_up_rank(args)
        self._args, self._flag = args, flag
        self._layout = Layout(args, self._ranks)
        index = self._layout.index
        self.rank, self.size, self.local_rank = self._ranks.rank, self._ranks.size, self._ranks.local_rank
        self.distributed = self._ranks.mode
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.epochs, self.batch_size = int(args.epochs), int(args.batch_size)
        self.learning_rate = float(args.learning_rate) * self.size
        user = user_model_of(args)
        self.params: Dict[str, Any] = dict(user.params) if user is not None else {}
        self.input_shape: Tuple[int, ...] = tensor_shape(index["feature_shape"])  # type: ignore[arg-type]
        self.num_classes = int(index["num_classes"])  # type: ignore[call-overload]
        self.class_names: List[str] = list(index["class_names"])  # type: ignore[call-overload]
        self.multi_label = self._layout.multi
        self.steps_per_epoch = self._layout.steps_per_epoch
        self.loss = loss_function(self.multi_label)
        self._position, self._start, self._history = Position(0, 0), Position(0, 0), []  # type: ignore[var-annotated]
        self._model: Optional[torch.nn.Module] = None
        self._checkpoints: Optional[RunCheckpoints] = None
        self._epoch_open, self._stop_at_epoch_end, self._started = False, False, time.perf_counter()
        self._statistics_averaged = False
        self._failures = injected_failures(args)
        # the script's steps timed with the rank's use of its allocation, or not at all
        self._steps = ScriptSteps(StepClock()) if args.usage_seconds > 0 else None
        self.seconds: List[float] = []
        self.first_step_unix: Optional[float] = None
        self.finished = False

    def track(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):  # type: ignore[no-untyped-def]
        """Checkpoint ``model`` and ``optimizer`` with the run, restore the newest sound checkpoint of this run (every
        rank the same one), and return ``(module, optimizer)`` to train with: wrapped for the distributed mode, the
        gradients averaged over the ranks at each ``optimizer.step()``. Call it once, before the loop."""
        model = model.to(self.device)
        net, optimizer = self._ranks.wrap(model, optimizer)
        if self._steps is not None:
            time_optimizer(optimizer, GradientClock(model), self._steps)
        self._model = model
        self._checkpoints = RunCheckpoints(self._args.checkpoint_dir, read_identity(self._args),
                                           self._args.keep_checkpoints, model, optimizer, self.rank, self.size,
                                           self._ranks.barrier, self._ranks.allgather_object)
        resumed = self._checkpoints.restore()
        if resumed:
            self._position = Position(int(resumed["epoch"]), int(resumed["step"]))  # type: ignore[arg-type]
            self._history = list(dict(resumed["state"]).get("history", []))  # type: ignore[arg-type]
        else:
            self._ranks.broadcast_start(model, optimizer)
        self._start = Position(self._position.epoch, self._position.step)
        return net, optimizer

    def _epoch_begins(self) -> None:
        self._started = time.perf_counter()
        self._statistics_averaged = False

    def train_batches(self, epoch: int) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """This rank's ``(x, y)`` batches of ``epoch`` on the rank's device, in the epoch-keyed order, less those
        done before a resume; ``y`` the class index (single-label) or the multi-hot vector (multi-label)."""
        skip = self._position.step if epoch == self._position.epoch else 0
        batches = self._layout.train.epoch(epoch, skip)
        if self._args.slow_input:
            batches = slowed_batches(batches, self._args.slow_input)
        for x, y in self._timed_batches(batches):
            if self.first_step_unix is None:
                self.first_step_unix = time.time()
            self._position.step += 1  # counted as done when handed out: a stop after its step resumes after it
            yield x.to(self.device), y.to(self.device)

    def should_stop(self) -> bool:
        """True on every rank together once any rank got a stop signal; then call :meth:`stop`. An allreduce: every
        rank calls it at the same points, after a step. After an epoch's last step it says False and the stop comes
        at :meth:`end_epoch`."""
        with self._between_steps():
            for failure in self._failures:  # a test's injected failure, after this step
                failure.after_step(self.rank, self._position.epoch, self._position.step)
            stop = bool(self._ranks.allreduce_max(1 if self._flag.signal else 0))
        if stop and self._position.step >= self.steps_per_epoch:
            self._stop_at_epoch_end = True
            return False
        return stop

    def stop(self) -> NoReturn:
        """Save a checkpoint where the run stands and end this rank with the status that says "stopped, resume me".
        Every rank calls it."""
        checkpoints = self._tracked("stop")
        state: Dict[str, object] = {"history": self._history}
        if self._flag.unix is not None:
            state["signal_unix"] = self._flag.unix
        checkpoints.save(self._position.epoch, self._position.step, self.steps_per_epoch, state, stop_reason(self._flag))
        raise StopRequested("stopped at epoch %d step %d on %s" % (self._position.epoch, self._position.step,
                                                                  stop_reason(self._flag)))

    def validate(self, model: torch.nn.Module) -> Dict[str, float]:
        """``val_loss`` and ``val_accuracy`` of ``model`` (logits) on the ranks' validation shares with the task's
        loss and accuracy, averaged over the ranks (every rank calls it). First the module's floating buffers
        (BatchNorm's running statistics, which each rank's steps moved on its own data) are averaged over the ranks,
        as :meth:`end_epoch` would, so the ranks validate one model."""
        self._average_statistics()
        return validation_metrics(model, self._layout, self.loss, {}, self.device, self._ranks)

    def end_epoch(self, metrics: Dict[str, float]) -> None:
        """End the epoch: ``metrics`` (at least :data:`REPORTED`) averaged over the ranks into the history, rank 0's
        progress line, a checkpoint when one is due, and the agreed stop at the epoch's end. Every rank calls it.
        The module's floating buffers are averaged over the ranks first, unless :meth:`validate` did this epoch."""
        checkpoints = self._tracked("end_epoch")
        self._average_statistics()
        for failure in self._failures:  # a test's injected failure, at the epoch's end before its checkpoint
            failure.after_epoch(self.rank, self._position.epoch)
        missing = [key for key in REPORTED if key not in metrics]
        if missing:
            raise UserCodeError("run.end_epoch(metrics): metrics lacks %s (the report plots %s)"
                                % (", ".join(missing), ", ".join(REPORTED)))
        keys = sorted(metrics)
        row = dict(zip(keys, self._ranks.mean_of([float(metrics[key]) for key in keys])))
        self.seconds.append(time.perf_counter() - self._started)
        self._history.append(row)
        self._position = Position(self._position.epoch + 1, 0)
        self._epoch_open = False
        if self.rank == 0:
            print(progress_line(self._position.epoch, self.epochs, row, self.seconds[-1]), flush=True)
        if checkpoint_due(self._position.epoch, self.epochs, self._args.checkpoint_every):
            checkpoints.save(self._position.epoch, 0, self.steps_per_epoch, {"history": self._history}, "epoch end")
        if self._position.epoch < self.epochs and (self._stop_at_epoch_end or self.should_stop()):
            self.stop()

    def finish(self) -> None:
        """After the last epoch: rank 0 writes the model (TorchScript, traced on one training batch), history,
        TensorBoard logs and metrics and closes the run's checkpoints; every rank writes its result. Every rank
        calls it. UserCodeError naming the parameters and buffers where the ranks' modules differ."""
        checkpoints = self._tracked("finish")
        if self._position.epoch < self.epochs:
            raise UserCodeError("run.finish() after %d of %d epochs" % (self._position.epoch, self.epochs))
        model = self._model
        assert model is not None
        mine = [(name, hashlib.sha256(tensor.detach().cpu().numpy().tobytes()).hexdigest(), name in parameters)
                for parameters in [dict(model.named_parameters())] for name, tensor in model.state_dict().items()]
        differ = ranks_disagree(self._ranks.allgather_object(mine))
        if differ:
            raise UserCodeError(differ)
        if self.rank == 0:
            write_run_outputs(self._args, self._model, self._layout, self._history, self.seconds, self._traced())  # type: ignore[arg-type]
            checkpoints.finish()
        write_rank_result(self._args, self._ranks, self._model, self._position, self._start, self, self._layout,  # type: ignore[arg-type]
                          step_times=self._step_times())
        self._ranks.barrier()
        self.finished = True

    def _traced(self) -> bytes:
        """The model as a TorchScript archive (traced in evaluation mode on the first validation batch)."""
        model = self._model
        assert model is not None
        x, _ = next(iter(self._layout.val.epoch(0)))
        model.eval()
        buffer = io.BytesIO()
        with torch.no_grad():
            torch.jit.save(torch.jit.trace(model, x.to(self.device)), buffer)
        return buffer.getvalue()

    def _average_statistics(self) -> None:
        """The module's floating buffers averaged over the ranks, once an epoch."""
        if not self._statistics_averaged:
            self._tracked("validate")
            average_buffers(self._model, self._ranks)  # type: ignore[arg-type]
            self._statistics_averaged = True

    def _tracked(self, call: str) -> RunCheckpoints:
        if self._checkpoints is None:
            raise UserCodeError("run.%s() before run.track(model, optimizer): hvdflow checkpoints and restores what "
                                "track names" % call)
        return self._checkpoints
