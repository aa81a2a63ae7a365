"""The trainer's entry point: ``python3 -m hvdflow_trainer.train``, as every launcher starts a rank.

Reads the options, installs the stop-signal handler before the framework loads, and hands over to the framework's
step loop (its folder's ``fit``, :mod:`hvdflow_trainer.frameworks`: :mod:`hvdflow_trainer.keras.fit` for Horovod's
Keras API), which trains deterministically and resumably on a prepared dataset. Every rank restores the newest sound
checkpoint of the same run (:mod:`.checkpoints`); a stop signal ends the run after a checkpoint with status
:data:`hvdflow_runstate.STOPPED_EXIT` (:mod:`.run_control`). Each rank writes ``rank-<r>.json`` (placement, versions and
the sha256 of its final weights); rank 0 writes the model, ``history.csv``, TensorBoard logs and ``metrics.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from hvdflow_runstate import STOPPED_EXIT, STOPPED_LINE_END

from . import faults, frameworks, user_code
from .neighbours import TOPOLOGIES
from .rank_exit import run_rank
from .run_control import StopFlag, StopRequested


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The trainer's options (a test's hidden fault options included)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", required=True, help="prepared dataset directory (with index.json)")
    parser.add_argument("--out", required=True, help="output directory")
    frameworks.add_options(parser)
    parser.add_argument("--model", default="mlp", help="mlp, small-cnn, resnet50, or user (--model-code and --model-build)")
    parser.add_argument("--hidden-units", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="per rank; scaled by the number of ranks")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--shuffle-buffer", type=int, default=10000, help="records in each rank's shuffle buffer")
    parser.add_argument("--deterministic-allreduce", action="store_true",
                        help="allreduce each tensor on its own (no tensor fusion): reproducible sums with 3+ ranks")
    parser.add_argument("--strategy", choices=("allreduce", "neighbour"), default="allreduce",
                        help="allreduce the gradients, or average models with neighbours after every step")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="ring", help="the neighbours (neighbour strategy)")
    parser.add_argument("--shard-order", choices=("shuffled", "by_label"), default="shuffled",
                        help="deal the training split out as planned (IID), or sorted by label (non-IID)")
    parser.add_argument("--no-op-determinism", action="store_true",
                        help="leave TensorFlow's op determinism off (an experiment's deterministic: false)")
    parser.add_argument("--threads", type=int, default=1,
                        help="TensorFlow's intra-op and tf.data's threads per rank: the cores it owns (the launcher says)")
    parser.add_argument("--checkpoint-dir", required=True, help="the run's checkpoint folder (kept across attempts)")
    parser.add_argument("--identity", required=True, help="JSON file: the run's identity (hvdflow_runstate.run_identity)")
    parser.add_argument("--elastic-ranks", type=int, default=0,
                        help="train under Horovod's elastic API; the rank count the global batch and rate are set for")
    parser.add_argument("--membership", default="", help="elastic: the JSON-lines file rank 0 appends each membership to")
    parser.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints")
    parser.add_argument("--keep-checkpoints", type=int, default=2, help="checkpoints kept")
    user_code.add_options(parser)
    faults.add_options(parser)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.train --dataset DIR --out DIR [hyperparameters]``."""
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    flag = StopFlag()
    flag.install()  # before TensorFlow loads (seconds): a signal then is kept, not lost
    if args.model_script:
        from .script import run_script as train  # the user's own loop, with hvdflow's script API
    else:
        train = frameworks.module_of(args.framework, "fit").train  # loaded after the handler is in place

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
