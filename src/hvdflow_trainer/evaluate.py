"""Test-set metrics of a trained model as JSON: single-label (argmax) or multi-label (sigmoid scores) metrics.

The entry point (``python3 -m hvdflow_trainer.evaluate``); the framework's side is its folder's ``evaluate`` module
(:mod:`hvdflow_trainer.keras.evaluate`, :mod:`hvdflow_trainer.pytorch.evaluate`), chosen by the model file the run
left (:func:`hvdflow_trainer.frameworks.framework_of_model`).
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from hvdflow_index import write_json

from . import user_code
from .frameworks import framework_of_model, module_of


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.evaluate --model M --dataset D --out FILE``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="the trained model's folder (model.keras or model.pt in it)")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--batch-size", type=int, default=256)
    user_code.add_options(parser)
    args = parser.parse_args(argv)
    evaluate = module_of(framework_of_model(args.model), "evaluate").evaluate
    try:
        write_json(args.out, evaluate(args.model, args.dataset, args.batch_size, user_code.user_model_of(args)))
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)


if __name__ == "__main__":
    main()
