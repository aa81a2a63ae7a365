"""A user's own model checked once, in the image, on the prepared dataset's shape, before any training job:
``python3 -m hvdflow_trainer.check_model --dataset DIR --out FILE --model-code ... --model-build ...``.

The train rule waits for it (a local rule: under Slurm it fails on the login node in seconds, not after queueing).
It names a syntax error (file and line), a missing module or function, a signature that does not take the arguments,
parameters the function does not accept, a value that is not a Keras model (or, with ``--framework pytorch``, a
torch module), an output shape that does not match the classes, and an op without a deterministic kernel; it writes
what it built to ``--out``. A training script
(``--model-script``) is compiled, not run: a syntax error is named with its file and line.
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, List, Optional

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
    parser.add_argument("--framework", choices=("tensorflow", "pytorch"), default="tensorflow")
    user_code.add_options(parser)
    args = parser.parse_args(argv)
    user = user_code.user_model_of(args)
    if user is None:
        parser.error("--model-code and --model-build (or --model-script) name the model to check")
    try:
        if user.script:
            built = check_script(user.code, user.script)
        else:
            index = read_index(args.dataset)
            if args.framework == "pytorch":  # the framework, once the options are read
                from .pytorch.models import check_user_model
            else:
                from .keras.models import check_user_model

            built = check_user_model(user, index["feature_shape"], int(index["num_classes"]),  # type: ignore[arg-type,call-overload]
                                     index["task"] == "multi-label", args.seed, not args.no_op_determinism)
            built["summary"] = "builds a model of %d parameters, output %s" % (built["parameters"],
                                                                              built["output_shape"])
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)
    write_json(args.out, built)
    print("hvdflow: %s %s" % (user.script or user.build, built["summary"]), flush=True)


def check_script(code: str, script: str) -> Dict[str, object]:
    """A training script compiled (not run): UserCodeError naming its file and line where it does not parse."""
    path = os.path.join(code, script)
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise user_code.UserCodeError("%s, line %s: %s (the training script)" % (exc.filename, exc.lineno, exc.msg)) \
            from None
    return {"script": script, "summary": "compiles (%d lines); it runs its own loop" % source.count(b"\n")}


if __name__ == "__main__":
    main()
