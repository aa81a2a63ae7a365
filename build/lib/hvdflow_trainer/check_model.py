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

import os
from typing import List, Optional

from hvdflow_index import read_index
from hvdflow_wire.model_check import ModelCheck
from hvdflow_wire.user_code import USER_CODE_WARNING

from . import frameworks, user_code
from .options import CheckModelOptions


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.check_model --dataset DIR --out FILE --model-code DIR --model-build
    module:function [--model-params JSON] [--model-loss ...] [--model-metrics ...]``."""
    args = CheckModelOptions.parse(argv)
    user = user_code.user_model_of(args)
    if user is None:
        CheckModelOptions.parser().error("--model-code and --model-build (or --model-script) name the model to check")
    try:
        if user.script:
            built = check_script(user.code, user.script)
        else:
            index = read_index(args.dataset)
            check_user_model = frameworks.module_of(args.framework, "models").check_user_model
            built = check_user_model(user, index["feature_shape"], int(index["num_classes"]),  # type: ignore[arg-type,call-overload]
                                     index["task"] == "multi-label", args.seed, not args.no_op_determinism)
    except user_code.UserCodeError as exc:
        user_code.exit_naming(exc)
    built.write(args.out)
    print("hvdflow: %s %s" % (user.script or user.build, built.summary), flush=True)
    unresumable = built.unresumable_random_ops
    if unresumable:
        print(USER_CODE_WARNING + "%s: a resumed run cannot continue these random ops where they were (their position "
              "is inside the op, which no checkpoint holds), so it will not give the uninterrupted run's weights: %s. "
              "Draw from a Keras random layer (Dropout, GaussianNoise, RandomFlip, ...) or a tf.random.Generator kept "
              "on a layer instead: hvdflow checkpoints those" % (user.build, "; ".join(unresumable)), flush=True)


def check_script(code: str, script: str) -> ModelCheck:
    """A training script compiled (not run): UserCodeError naming its file and line where it does not parse."""
    path = os.path.join(code, script)
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise user_code.UserCodeError("%s, line %s: %s (the training script)" % (exc.filename, exc.lineno, exc.msg)) \
            from None
    return ModelCheck.compiled(script, source.count(b"\n"))


if __name__ == "__main__":
    main()
