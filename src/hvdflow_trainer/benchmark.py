"""One benchmark measurement as Horovod ranks: training throughput of a model on synthetic data, or Horovod's allreduce
bandwidth against message size with the raw TCP bandwidth between two of the same ranks.

Every rank runs this module (``python3 -m hvdflow_trainer.benchmark``) as the launcher starts it, in the container or
the native venv, and writes ``rank-<r>.json`` into ``--out``: rank 0's holds the measurement. The times it reports:

- ``import_seconds``: importing the framework and Horovod's API for it (TensorFlow and Horovod's Keras API, or torch
  and ``horovod.torch``, or torch and ``torch.distributed``) in this process (the slowest rank);
- ``launch_to_import_seconds``: from the launcher's start of the ranks (``--launched``, Unix time) to the end of those
  imports: what the runtime adds to starting a rank (udocker's Python, proot) counts here;
- ``seconds_to_first_step``: from the launcher's start to the end of the first training step (the slowest rank);
- ``samples_per_second``: the global training throughput after ``--warmup-steps`` steps, over ``--steps`` steps,
  or over a longer pass where those took less than ``--min-seconds`` (:func:`steps_for_window`; ``steps`` says how
  many; ``measured_seconds`` how long).

The data are one synthetic batch of the real shape of the data the model is made for (:data:`SHAPES`), fixed by the
seed and repeated: no dataset and no input pipeline are measured, only the model, the optimizer and Horovod.

This module is the entry point; what the frameworks' measurements share (the raw TCP bandwidth included) is
:mod:`hvdflow_trainer.measurement`, and the measurements are the framework's folder's ``benchmark`` module
(:mod:`hvdflow_trainer.keras.benchmark`, :mod:`hvdflow_trainer.pytorch.benchmark`; :mod:`hvdflow_trainer.frameworks`).
"""

from __future__ import annotations

import argparse
import os
from typing import List, Optional

from hvdflow_index import write_json

from . import frameworks, user_code
from .measurement import ALLREDUCE, SHAPES
from .rank_exit import run_rank
from .user_code import USER_MODEL


def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point of every rank."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder of rank 0's result.json")
    parser.add_argument("--kind", required=True, choices=sorted(SHAPES) + [ALLREDUCE, USER_MODEL],
                        help="a built-in model, the allreduce sweep, or user: a user's model (--model-code, "
                             "--model-build, --input-shape, --num-classes)")
    parser.add_argument("--input-shape", type=int, nargs=3, help="user: H W C of the synthetic batch")
    parser.add_argument("--num-classes", type=int, help="user: the classes of the synthetic labels")
    parser.add_argument("--multi-label", action="store_true", help="user: multi-hot labels")
    user_code.add_options(parser)
    parser.add_argument("--launched", type=float, required=True, help="Unix time the launcher started the ranks")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--hidden-units", type=int, default=64)
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first (at least 1)")
    parser.add_argument("--steps", type=int, default=30, help="steps timed after the warm-up")
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="time more steps where --steps took less than this (steps_for_window)")
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=[1, 64, 1024, 16384, 65536])
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow's intra-op threads: the rank's cores")
    parser.add_argument("--seed", type=int, default=1234)
    frameworks.add_options(parser)
    args = parser.parse_args(argv)
    result = frameworks.module_of(args.framework, "benchmark").run(args)  # the folder times its own imports
    write_json(os.path.join(args.out, "rank-%d.json" % result["rank"]), result)


if __name__ == "__main__":
    run_rank(main)
