"""Test-set metrics of a trained model as JSON: single-label (argmax) or multi-label (sigmoid scores) metrics.

The entry point (``python3 -m hvdflow_trainer.evaluate``); the framework's side is its folder's ``evaluate`` module
(:mod:`hvdflow_trainer.keras.evaluate`, :mod:`hvdflow_trainer.pytorch.evaluate`), chosen by the model file the run
left (:func:`hvdflow_trainer.frameworks.framework_of_model`).
"""

from __future__ import annotations

from typing import List, Optional

from . import user_code
from .frameworks import framework_of_model, module_of
from .options import EvaluateOptions


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.evaluate --model M --dataset D --out FILE``."""
    args = EvaluateOptions.parse(argv)
    evaluate = module_of(framework_of_model(args.model), "evaluate").evaluate
    try:
        evaluate(args.model, args.dataset, args.batch_size, user_code.user_model_of(args)).write(args.out)
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)


if __name__ == "__main__":
    main()
