"""The frameworks the trainer trains with, declared once, and the one way an entry point reaches a framework's module.

A framework is a folder of this package with modules of the same names (``fit``, ``script``, ``models``,
``evaluate``, ``benchmark``), which may import the framework-neutral modules beside it, never the other way round.
:data:`FRAMEWORKS` says, for each framework's name as the config and the trainer's ``--framework`` say it, its folder,
its distributed modes and the file its trained model is saved as; the entry points (``train``, ``script``,
``check_model``, ``evaluate``, ``benchmark``) reach the folder through :func:`module_of` only, after their options are
read (the framework loads in seconds, after the stop-signal handler is in place). A new framework is its folder and
one line here.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Dict, NamedTuple, Tuple

from hvdflow_wire import names


class Framework(NamedTuple):
    """One framework the trainer trains with."""

    folder: str
    """The subpackage of :mod:`hvdflow_trainer` holding its modules."""
    distributed: Tuple[str, ...]
    """Its distributed modes, the default first."""
    model_file: str
    """The file its trained model is saved as, in a run's ``model/`` folder."""
    about: str
    """What it is, in the options' help."""


FRAMEWORKS: Dict[str, Framework] = {
    "tensorflow": Framework("keras", ("horovod",), "model.keras", "TensorFlow with Horovod's Keras API"),
    "pytorch": Framework("pytorch", ("horovod", "ddp"), "model.pt",
                         "PyTorch with Horovod's PyTorch API (horovod) or DistributedDataParallel (ddp)"),
}
DEFAULT = names.FRAMEWORKS[0]
DISTRIBUTED = names.DISTRIBUTED
"""Every framework's distributed modes together, the default first (``hvdflow_wire.names``)."""


def module_of(framework: str, module: str) -> ModuleType:
    """The framework's module ``module`` (``fit``, ``script``, ``models``, ``evaluate``, ``benchmark``), imported
    now; ValueError naming the frameworks there are for an unknown name."""
    if framework not in FRAMEWORKS:
        raise ValueError("unknown framework %r; known: %s" % (framework, ", ".join(FRAMEWORKS)))
    return importlib.import_module("%s.%s.%s" % (__package__, FRAMEWORKS[framework].folder, module))


def framework_of_model(folder: str) -> str:
    """The framework whose trained model the folder ``folder`` holds; ValueError naming what it holds otherwise."""
    found = [name for name, f in FRAMEWORKS.items() if os.path.isfile(os.path.join(folder, f.model_file))]
    if len(found) != 1:
        raise ValueError("%s holds %s; a trained model's folder holds one of %s"
                         % (folder, ", ".join(sorted(os.listdir(folder))) or "nothing",
                            ", ".join(f.model_file for f in FRAMEWORKS.values())))
    return found[0]
