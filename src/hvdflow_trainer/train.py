"""The trainer's entry point: ``python3 -m hvdflow_trainer.train``, as every launcher starts a rank.

Reads the options, installs the stop-signal handler before the framework loads, and hands over to the framework's
step loop (its folder's ``fit``, :mod:`hvdflow_trainer.frameworks`: :mod:`hvdflow_trainer.keras.fit` for Horovod's
Keras API), which trains deterministically and resumably on a prepared dataset. Every rank restores the newest sound
checkpoint of the same run (:mod:`.checkpoints`); a stop signal ends the run after a checkpoint with status
:data:`hvdflow_runstate.STOPPED_EXIT` (:mod:`.run_control`). Each rank writes ``rank-<r>.json`` (placement, versions and
the sha256 of its final weights, and how it used its cores, memory and GPU: :mod:`.usage`); rank 0 writes the model,
``history.csv``, TensorBoard logs and ``metrics.json``.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from hvdflow_runstate import STOPPED_EXIT, STOPPED_LINE_END

from . import frameworks, user_code
from .options import TrainOptions
from .rank_exit import run_rank
from .run_control import StopFlag, StopRequested
from .usage import start_sampling


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.train --dataset DIR --out DIR [hyperparameters]``."""
    args = TrainOptions.parse(argv)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    flag = StopFlag()
    flag.install()  # before TensorFlow loads (seconds): a signal then is kept, not lost
    if args.model_script:
        from .script import run_script as train  # the user's own loop, with hvdflow's script API
    else:
        train = frameworks.module_of(args.framework, "fit").train  # loaded after the handler is in place

    start_sampling(args.usage_seconds)
    try:
        train(args, flag)
    except StopRequested as stop:
        print("hvdflow: %s%s" % (stop, STOPPED_LINE_END), flush=True)
        sys.exit(STOPPED_EXIT)
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)
    finally:
        flag.ignore()  # the run has ended: a stop signal during the exit must not change its status


if __name__ == "__main__":
    run_rank(main)
