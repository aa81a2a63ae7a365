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

import os
from typing import List, Optional

from hvdflow_index import write_json

from . import frameworks
from .options import BenchmarkOptions
from .rank_exit import run_rank


def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point of every rank."""
    args = BenchmarkOptions.parse(argv)
    rank, result = frameworks.module_of(args.framework, "benchmark").run(args)  # the folder times its own imports
    # every rank writes its rank-<r>.json (the launchers take a rank that exits 0 without one for a failed rank):
    # rank 0 its result, the others their rank
    path = os.path.join(args.out, "rank-%d.json" % rank)
    if result is not None:
        result.write(path)
    else:
        write_json(path, {"rank": rank})


if __name__ == "__main__":
    run_rank(main)
