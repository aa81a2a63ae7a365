"""A user's own model checked once, in the image, on the prepared dataset's shape, before any training job:
``python3 -m hvdflow_trainer.check_model --dataset DIR --out FILE --model-code ... --model-build ...``.

The train rule waits for it (a local rule: under Slurm it fails on the login node in seconds, not after queueing).
It names a syntax error (file and line), a missing module or function, a signature that does not take the arguments,
parameters the function does not accept, a value that is not a Keras model (or, with ``--framework pytorch``, a
torch module), an output shape that does not match the classes, and an op without a deterministic kernel; it warns,
naming them, of random ops whose position no checkpoint can hold (a resume would not continue them); it writes
what it built to ``--out``. A training script
(``--model-script``) is compiled, not run: a syntax error is named with its file and line.
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, List, Optional

from hvdflow_index import read_index, write_json
from hvdflow_wire.user_code import USER_CODE_WARNING

from . import frameworks, user_code


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.check_model --dataset DIR --out FILE --model-code DIR --model-build
    module:function [--model-params JSON] [--model-loss ...] [--model-metrics ...]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", required=True, help="prepared dataset directory (its index.json)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--no-op-determinism", action="store_true", help="the experiment's deterministic: false")
    frameworks.add_options(parser, distributed=False)
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
            check_user_model = frameworks.module_of(args.framework, "models").check_user_model
            built = check_user_model(user, index["feature_shape"], int(index["num_classes"]),  # type: ignore[arg-type,call-overload]
                                     index["task"] == "multi-label", args.seed, not args.no_op_determinism)
            built["summary"] = "builds a model of %d parameters, output %s" % (built["parameters"],
                                                                              built["output_shape"])
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)
    write_json(args.out, built)
    print("hvdflow: %s %s" % (user.script or user.build, built["summary"]), flush=True)
    unresumable = built.get("unresumable_random_ops")
    if unresumable:
        print(USER_CODE_WARNING + "%s: a resumed run cannot continue these random ops where they were (their position "
              "is inside the op, which no checkpoint holds), so it will not give the uninterrupted run's weights: %s. "
              "Draw from a Keras random layer (Dropout, GaussianNoise, RandomFlip, ...) or a tf.random.Generator kept "
              "on a layer instead: hvdflow checkpoints those" % (user.build, "; ".join(unresumable)),  # type: ignore[arg-type]
              flush=True)


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
