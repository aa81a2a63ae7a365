"""What hvdflow gives a user's own TensorFlow training script: the run object behind :func:`hvdflow_trainer.script.start`.

The script keeps its loop; the run object does what hvdflow's own Keras loop (:mod:`.fit`) does around it, with the
same parts: Horovod's set-up (:func:`.fit.set_up_rank`: init, the rank's GPU, seeds, op determinism, threads), the
rank's share of the prepared splits in the epoch-keyed order (:class:`.fit.Layout`), the run's checkpoints with
their manifest (:mod:`.checkpoints`), the agreed stop (:mod:`hvdflow_trainer.run_control`) and the outputs the
evaluate, plot and record rules read (:mod:`.outputs`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, Iterator, List, NoReturn, Tuple

import horovod.tensorflow as hvd_tf
import tensorflow as tf

from ..faults import injected_failures
from ..options import TrainOptions
from ..run_control import Position, StopFlag, StopRequested, checkpoint_due, progress_line, stop_reason
from ..script_run import ScriptEpochs, ranks_disagree
from ..step_times import ScriptSteps, StepClock
from ..user_code import UserCodeError, user_model_of
from .callbacks import EpochTimer, agree, average_over_ranks
from .checkpoints import floating_non_trainable
from .data import slowed
from .fit import Dataset, Layout, broadcast_start, open_checkpoints, resume, set_up_rank
from .outputs import write_rank_result, write_run_outputs
from .step_times import time_tape_exchange

REPORTED = ("loss", "accuracy", "val_loss", "val_accuracy")
"""What every epoch's row must hold: the report's learning curves plot them."""


class ScriptRun(ScriptEpochs):
    """One rank of a user's training script. Its attributes describe the run; its methods are called by every rank
    at the same points of the loop (they meet in allreduces).

    ``rank``, ``size``, ``local_rank``: Horovod's; ``epochs``: the run's epochs; ``batch_size``: this rank's batch;
    ``learning_rate``: the experiment's, scaled by the rank count (Horovod's recipe); ``params``: the experiment's
    ``model.params``; ``input_shape``, ``num_classes``, ``class_names``, ``multi_label``: the prepared dataset's;
    ``steps_per_epoch``: the batches :meth:`train_batches` yields in a whole epoch; ``validation``: this rank's share
    of the validation split as a ``tf.data.Dataset`` of batches.
    """

    def __init__(self, args: TrainOptions, flag: StopFlag) -> None:
        set_up_rank(args)
        self._args, self._flag = args, flag
        data = Dataset(args.dataset)
        self.rank, self.size, self.local_rank = hvd_tf.rank(), hvd_tf.size(), hvd_tf.local_rank()
        self.epochs, self.batch_size = int(args.epochs), int(args.batch_size)
        self.learning_rate = float(args.learning_rate) * self.size
        user = user_model_of(args)
        self.params: Dict[str, Any] = dict(user.params) if user is not None else {}
        self.input_shape: Tuple[int, ...] = tuple(data.index["feature_shape"])  # type: ignore[arg-type]
        self.num_classes = int(data.index["num_classes"])  # type: ignore[call-overload]
        self.class_names: List[str] = list(data.index["class_names"])  # type: ignore[call-overload]
        self.multi_label = data.multi
        self._layout = Layout(args, data, self.batch_size * self.size)
        self.steps_per_epoch = self._layout.steps_per_epoch
        self.validation = self._layout.val_data
        self._position, self._start, self._history = Position(0, 0), Position(0, 0), []  # type: ignore[var-annotated]
        self._timer, self._model, self._checkpoints = EpochTimer(), None, None
        self._epoch_open, self._stop_at_epoch_end, self._statistics_averaged = False, False, False
        self._failures = injected_failures(args)
        # the script's steps timed with the rank's use of its allocation, or not at all
        self._steps = ScriptSteps(StepClock()) if args.usage_seconds > 0 else None
        if self._steps is not None and self.size > 1:
            time_tape_exchange(self._steps)
        self.finished = False

    def track(self, model: tf.keras.Model, optimizer: tf.keras.optimizers.Optimizer) -> None:
        """Checkpoint ``model`` and ``optimizer`` with the run (its weights, every rank's BatchNorm statistics, its
        random layers' generators), and restore the newest sound checkpoint of this run (every rank the same one):
        :meth:`epochs` then starts after it. A run from scratch starts from rank 0's model. Call it once, before the
        loop."""
        self._model = model
        self._checkpoints = open_checkpoints(self._args, model, optimizer, per_rank=False)
        resumed, _, position, history = resume(self._checkpoints)
        self._position, self._history = position, history
        self._start = Position(position.epoch, position.step)
        if not resumed:
            broadcast_start(model)

    def _epoch_begins(self) -> None:
        self._timer.on_epoch_begin(self._position.epoch)
        self._statistics_averaged = False

    def train_batches(self, epoch: int) -> Iterator[Tuple[tf.Tensor, tf.Tensor]]:
        """This rank's ``(x, y)`` batches of ``epoch`` in the epoch-keyed order (a function of the seed, the epoch and
        the ranks alone), less those done before a resume; ``y`` the class index (single-label) or the multi-hot
        vector (multi-label)."""
        skip = self._position.step if epoch == self._position.epoch else 0
        batches = self._layout.epoch_data(epoch, skip)[0]
        if self._args.slow_input:
            batches = slowed(batches, self._args.slow_input)
        for x, y in self._timed_batches(batches):
            self._timer.on_train_batch_begin(self._position.step)
            self._position.step += 1  # counted as done when handed out: a stop after its step resumes after it
            yield x, y

    def should_stop(self) -> bool:
        """True on every rank together once any rank got a stop signal (the scheduler's warning, Ctrl-C); then call
        :meth:`stop`. Every rank must call it at the same points (it is an allreduce), after a step is done. After an
        epoch's last step it says False and the stop comes at :meth:`end_epoch`, after the epoch's row and checkpoint
        (as in hvdflow's own loop: a resumed run never starts with an empty epoch)."""
        with self._between_steps():
            for failure in self._failures:  # a test's injected failure, after this step
                failure.after_step(self.rank, self._position.epoch, self._position.step)
            stop = bool(agree(1 if self._flag.signal else 0, "hvdflow_stop"))
        if stop and self._position.step >= self.steps_per_epoch:
            self._stop_at_epoch_end = True
            return False
        return stop

    def stop(self) -> NoReturn:
        """Save a checkpoint where the run stands, wait until it is on disk, and end this rank with the status that
        says "stopped, resume me": the next attempt's :meth:`track` resumes from it. Every rank calls it."""
        self._tracked("stop")
        if self._flag.unix is not None:
            state: Dict[str, object] = {"history": self._history, "signal_unix": self._flag.unix}
        else:
            state = {"history": self._history}
        self._checkpoints.save(self._position.epoch, self._position.step, self.steps_per_epoch, state,  # type: ignore[union-attr]
                               stop_reason(self._flag))
        agree(0, "hvdflow_saved")
        raise StopRequested("stopped at epoch %d step %d on %s" % (self._position.epoch, self._position.step,
                                                                  stop_reason(self._flag)))

    def validate(self, model: tf.keras.Model) -> Dict[str, float]:
        """``val_loss`` and ``val_accuracy`` of ``model`` on this rank's validation share, with the task's loss and
        accuracy (those hvdflow's own loop compiles with); :meth:`end_epoch` averages them over the ranks. Every rank
        calls it: first the model's non-trainable state (BatchNorm's statistics, which each rank's steps moved on its
        own data) is averaged over the ranks, as :meth:`end_epoch` would, so the ranks validate one model."""
        self._tracked("validate")
        self._average_statistics()
        if self.multi_label:
            loss, accuracy = tf.keras.metrics.BinaryCrossentropy(), tf.keras.metrics.BinaryAccuracy()
        else:
            loss, accuracy = tf.keras.metrics.SparseCategoricalCrossentropy(), tf.keras.metrics.SparseCategoricalAccuracy()
        for x, y in self.validation:
            predicted = model(x, training=False)
            loss.update_state(y, predicted)
            accuracy.update_state(y, predicted)
        return {"val_loss": float(loss.result()), "val_accuracy": float(accuracy.result())}

    def end_epoch(self, metrics: Dict[str, float]) -> None:
        """End the epoch: ``metrics`` (at least :data:`REPORTED`) averaged over the ranks into the history, rank 0's
        progress line, a checkpoint when one is due, and the agreed stop at the epoch's end. Every rank calls it.
        The model's non-trainable state is averaged over the ranks first, unless :meth:`validate` did this epoch."""
        self._tracked("end_epoch")
        self._average_statistics()
        for failure in self._failures:  # a test's injected failure, at the epoch's end before its checkpoint
            failure.after_epoch(self.rank, self._position.epoch)
        missing = [key for key in REPORTED if key not in metrics]
        if missing:
            raise UserCodeError("run.end_epoch(metrics): metrics lacks %s (the report plots %s)"
                                % (", ".join(missing), ", ".join(REPORTED)))
        row = {key: float(hvd_tf.allreduce(tf.constant(float(metrics[key]), tf.float64), op=hvd_tf.Average,
                                           name="hvdflow_epoch_%s" % key)) for key in sorted(metrics)}
        self._timer.on_epoch_end(self._position.epoch)
        self._history.append(row)
        self._position = Position(self._position.epoch + 1, 0)
        self._epoch_open = False
        if self.rank == 0:
            print(progress_line(self._position.epoch, self.epochs, row, self._timer.seconds[-1]), flush=True)
        if checkpoint_due(self._position.epoch, self.epochs, self._args.checkpoint_every):
            self._checkpoints.save(self._position.epoch, 0, self.steps_per_epoch, {"history": self._history},  # type: ignore[union-attr]
                                   "epoch end")
        if self._position.epoch < self.epochs and (self._stop_at_epoch_end or self.should_stop()):
            self.stop()

    def finish(self) -> None:
        """After the last epoch: rank 0 writes the model, ``history.csv``, TensorBoard logs and ``metrics.json`` and
        closes the run's checkpoints; every rank writes its result (the sha256 of its weights). Every rank calls it.
        UserCodeError naming the variables where the ranks' models differ."""
        self._tracked("finish")
        if self._position.epoch < self.epochs:
            raise UserCodeError("run.finish() after %d of %d epochs" % (self._position.epoch, self.epochs))
        trainable = {id(v) for v in self._model.trainable_variables}  # type: ignore[union-attr]
        mine = [(v.name, hashlib.sha256(v.numpy().tobytes()).hexdigest(), id(v) in trainable)
                for v in self._model.variables]  # type: ignore[union-attr]
        differ = ranks_disagree(hvd_tf.allgather_object(mine, name="hvdflow_variable_digests"))
        if differ:
            raise UserCodeError(differ)
        if self.rank == 0:
            write_run_outputs(self._args.out, self._model, self._history, self.epochs, self._timer,
                              self.steps_per_epoch)
            self._checkpoints.finish()  # type: ignore[union-attr]
        write_rank_result(self._args, self._model, None, self._position, self._start, self._timer, self._layout,
                          self._step_times())
        self.finished = True

    def _average_statistics(self) -> None:
        """The model's floating non-trainable weights averaged over the ranks, once an epoch."""
        if not self._statistics_averaged:
            average_over_ranks(floating_non_trainable(self._model))
            self._statistics_averaged = True

    def _tracked(self, call: str) -> None:
        if self._checkpoints is None:
            raise UserCodeError("run.%s() before run.track(model, optimizer): hvdflow checkpoints and restores what "
                                "track names" % call)
