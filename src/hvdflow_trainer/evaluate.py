"""Test-set metrics of a trained model as JSON: single-label (argmax) or multi-label (sigmoid scores) metrics.

The entry point (``python3 -m hvdflow_trainer.evaluate``); the framework's side is :mod:`hvdflow_trainer.keras.evaluate`.
"""

from __future__ import annotations

import argparse
import os
from typing import List, Optional

from hvdflow_index import write_json

from . import user_code

MODEL_FILES = {"model.keras": "tensorflow", "model.pt": "pytorch"}
"""The file a training run leaves in its ``model/`` folder, by the framework that trained it."""


def framework_of(folder: str) -> str:
    """The framework whose model the folder ``folder`` holds; ValueError naming what it holds otherwise."""
    found = [framework for name, framework in MODEL_FILES.items() if os.path.isfile(os.path.join(folder, name))]
    if len(found) != 1:
        raise ValueError("%s holds %s; a trained model's folder holds one of %s"
                         % (folder, ", ".join(sorted(os.listdir(folder))) or "nothing", ", ".join(MODEL_FILES)))
    return found[0]


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.evaluate --model M --dataset D --out FILE``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="the trained model's folder (model.keras or model.pt in it)")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--batch-size", type=int, default=256)
    user_code.add_options(parser)
    args = parser.parse_args(argv)
    if framework_of(args.model) == "pytorch":
        from .pytorch.evaluate import evaluate
    else:
        from .keras.evaluate import evaluate
    try:
        write_json(args.out, evaluate(args.model, args.dataset, args.batch_size, user_code.user_model_of(args)))
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)


if __name__ == "__main__":
    main()
