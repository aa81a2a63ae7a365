"""The API of a user's own training script (``model: {code: folder, script: train.py}``), and how the trainer runs it.

The script runs once per rank, in the image, under hvdflow's launcher, as ``__main__`` with the user's folder first
on ``sys.path``::

    from hvdflow_trainer.script import start

    run = start()                       # Horovod initialised: the rank's GPU, threads, seeds, op determinism
    model, optimizer = ..., ...         # the script's own (run.input_shape, run.num_classes, run.params)
    run.track(model, optimizer)         # checkpointed with the run; resumes from the newest checkpoint
    for epoch in run.epochs_to_run():
        for x, y in run.train_batches(epoch):      # this rank's share, in the epoch-keyed order
            ...                                    # one step (hvd.DistributedGradientTape)
            if run.should_stop():                  # true on every rank together after a stop signal
                run.stop()                         # checkpoint, then exit to be resumed
        run.end_epoch({"loss": ..., "accuracy": ..., **run.validate(model)})
    run.finish()                        # the model, history, metrics and every rank's result

The run object is :class:`hvdflow_trainer.keras.script.ScriptRun` (TensorFlow) or, with ``framework: pytorch``,
:class:`hvdflow_trainer.pytorch.script.ScriptRun` (both built on :mod:`hvdflow_trainer.script_run`), whose
``track`` returns the module and optimizer to train with (``examples/training-script/train_digits_torch.py``); their
docstrings are the reference.
A script that ends without ``run.finish()`` fails, saying so; an exception in it is named with the user's file and
line (:mod:`hvdflow_trainer.user_code`).
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any, Optional

from .frameworks import module_of
from .options import TrainOptions
from .run_control import StopFlag, StopRequested
from .user_code import UserCodeError, user_frame


class _Current:
    """The rank's options and stop flag (set by :func:`run_script`) and the run :func:`start` made."""

    args: Optional[TrainOptions] = None
    flag: Optional[StopFlag] = None
    run: Any = None


def start() -> Any:
    """The run this rank's script trains in (:class:`~hvdflow_trainer.keras.script.ScriptRun`), made at the first
    call (Horovod's set-up happens then) and the same one after."""
    if _Current.args is None or _Current.flag is None:
        raise RuntimeError("hvdflow_trainer.script.start() is for a training script hvdflow runs (model: {code, script})")
    if _Current.run is None:
        _Current.run = module_of(_Current.args.framework, "script").ScriptRun(_Current.args, _Current.flag)
    return _Current.run


def run_script(args: TrainOptions, flag: StopFlag) -> None:
    """Run the experiment's script (``--model-code``/``--model-script``) as ``__main__``; UserCodeError where it
    raises, exits with an error, or ends without ``run.finish()``. StopRequested passes through (:meth:`stop`)."""
    code, script = args.model_code, args.model_script
    path = os.path.join(code, script)
    _Current.args, _Current.flag, _Current.run = args, flag, None
    if code not in sys.path:
        sys.path.insert(0, code)
    try:
        runpy.run_path(path, run_name="__main__")
    except (StopRequested, UserCodeError):
        raise
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise UserCodeError("the training script %s exited with %r" % (script, exc.code)) from None
    except Exception as exc:
        raise UserCodeError("the training script %s raised %s: %s%s"
                            % (script, type(exc).__name__, exc, user_frame(exc, code))) from None
    if _Current.run is None or not _Current.run.finished:
        raise UserCodeError("the training script %s ended without calling run.finish(): hvdflow has no model, "
                            "history or rank result to record" % script)
