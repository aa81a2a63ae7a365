"""A user's own model checked once, in the image, on the prepared dataset's shape, before any training job:
``python3 -m hvdflow_trainer.check_model --dataset DIR --out FILE --model-code ... --model-build ...``.

The train rule waits for it (a local rule: under Slurm it fails on the login node in seconds, not after queueing).
It names a syntax error (file and line), a missing module or function, a signature that does not take the arguments,
parameters the function does not accept, a value that is not a Keras model, an output shape that does not match the
classes, and an op without a deterministic kernel; it writes what it built to ``--out``.
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from hvdflow_index import read_index, write_json

from . import user_code


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.check_model --dataset DIR --out FILE --model-code DIR --model-build
    module:function [--model-params JSON] [--model-loss ...] [--model-metrics ...]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", required=True, help="prepared dataset directory (its index.json)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--no-op-determinism", action="store_true", help="the experiment's deterministic: false")
    user_code.add_options(parser)
    args = parser.parse_args(argv)
    user = user_code.user_model_of(args)
    if user is None:
        parser.error("--model-code and --model-build name the model to check")
    index = read_index(args.dataset)
    from .keras.models import check_user_model  # the framework, once the options are read

    try:
        built = check_user_model(user, index["feature_shape"], int(index["num_classes"]),  # type: ignore[arg-type,call-overload]
                                 index["task"] == "multi-label", args.seed, not args.no_op_determinism)
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)
    write_json(args.out, built)
    print("hvdflow: %s builds a model of %d parameters, output %s" % (user.build, built["parameters"],
                                                                    built["output_shape"]), flush=True)


if __name__ == "__main__":
    main()
