"""A user's own code inside the container: the folder the launcher bound in, and the ``module:function`` names in it
that the experiment gives (``--model-code``, ``--model-build``, ``--model-params``, ``--model-loss``,
``--model-metrics``). Loading and calling them fails with a :class:`UserCodeError` that names the file and line of a
syntax error, the module or function that is missing, or the arguments a function does not take: never a bare
traceback from inside the trainer. Framework-neutral: what the functions must return is the framework's to check
(:mod:`.keras.models`).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from typing import Any, Callable, Dict, NamedTuple, NoReturn, Optional, Tuple

from hvdflow_wire.user_code import USER_CODE_ERROR, USER_CODE_EXIT

from .options import UserModelOptions


class UserCodeError(Exception):
    """The user's code cannot be loaded, or a function of it cannot be called as hvdflow calls it, or returns what
    hvdflow cannot use."""


def exit_naming(exc: UserCodeError) -> NoReturn:
    """End the process with ``USER_CODE_EXIT``, the error its last line on stderr (:mod:`hvdflow_wire.user_code`)."""
    print(USER_CODE_ERROR + str(exc), file=sys.stderr, flush=True)
    sys.exit(USER_CODE_EXIT)


class UserModelRef(NamedTuple):
    """Where a user's model is: the folder, the build function, its keyword arguments, the optional loss and metrics
    functions (each ``module:function``)."""

    code: str
    build: str
    params: Dict[str, Any]
    loss: Optional[str] = None
    metrics: Optional[str] = None
    script: str = ""
    """A training script of the folder (its own loop, :mod:`hvdflow_trainer.script`) in place of ``build``."""


def user_model_of(options: UserModelOptions) -> Optional[UserModelRef]:
    """The user's model the options name (``--model-*``), or None for a built-in one."""
    if not options.model_code:
        return None
    return UserModelRef(options.model_code, options.model_build, json.loads(options.model_params), options.model_loss,
                        options.model_metrics, options.model_script)


def load_function(code: str, ref: str) -> Callable[..., Any]:
    """The function ``ref`` (``module:function``) of the user's folder ``code``."""
    module_name, _, function_name = ref.partition(":")
    if code not in sys.path:
        sys.path.insert(0, code)
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise UserCodeError("%s, line %s: %s (in %s, the module of %s)"
                            % (exc.filename, exc.lineno, exc.msg, code, ref)) from None
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise UserCodeError("%s: no module %s in %s" % (ref, module_name, code)) from None
        raise UserCodeError("%s: module %s imports %s, which the image does not have"
                            % (ref, module_name, exc.name)) from None
    except Exception as exc:  # the module's own code failed on import: name it, with the user's line
        raise UserCodeError("%s: importing %s failed: %s: %s%s"
                            % (ref, module_name, type(exc).__name__, exc, user_frame(exc, code))) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UserCodeError("%s: %s has no function %s" % (ref, getattr(module, "__file__", module_name), function_name))
    return function


def call(function: Callable[..., Any], ref: str, code: str, **arguments: Any) -> Any:
    """``function(**arguments)``, refused with the signature and the arguments where it cannot take them, and with the
    user's file and line where it raises."""
    try:
        signature = inspect.signature(function)
        signature.bind(**arguments)
    except TypeError as exc:
        raise UserCodeError("%s%s cannot be called with %s: %s"
                            % (ref, signature, ", ".join(sorted(arguments)), exc)) from None
    except ValueError:  # no signature to read (a builtin): let the call say
        pass
    try:
        return function(**arguments)
    except UserCodeError:
        raise
    except Exception as exc:
        raise UserCodeError("%s raised %s: %s%s" % (ref, type(exc).__name__, exc, user_frame(exc, code))) from None


BUILD_ARGUMENTS = ("input_shape", "num_classes", "multi_label")
"""What hvdflow passes every build function, beside the experiment's ``params``."""


def built_by_user(user: UserModelRef, shape: Tuple[int, ...], num_classes: int, multi_label: bool) -> Any:
    """What the user's build function returns for the dataset (``params`` naming hvdflow's own arguments refused);
    the framework checks that it is a model of its kind. UserCodeError naming what is wrong."""
    clash = sorted(set(user.params) & set(BUILD_ARGUMENTS))
    if clash:
        raise UserCodeError("%s: params %s are given by hvdflow (the dataset's %s); leave them out of params"
                            % (user.build, ", ".join(clash), ", ".join(BUILD_ARGUMENTS)))
    build = load_function(user.code, user.build)
    return call(build, user.build, user.code, input_shape=shape, num_classes=num_classes, multi_label=multi_label,
                **user.params)


def user_frame(exc: BaseException, code: str) -> str:
    """`` (at FILE, line N)`` of the innermost frame of the traceback in the user's folder, or nothing."""
    where = ""
    frame = exc.__traceback__
    root = os.path.abspath(code) + os.sep
    while frame is not None:
        filename = frame.tb_frame.f_code.co_filename
        if os.path.abspath(filename).startswith(root):
            where = " (at %s, line %d)" % (filename, frame.tb_lineno)
        frame = frame.tb_next
    return where
