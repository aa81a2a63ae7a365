"""Where this hvdflow's code is, and the environment that makes a child Python import the same code.

Kept out of the package's ``__init__``, which every ``python -m hvdflow...`` imports first: a rank's mode chooser
(:mod:`hvdflow.images.execmode_choice`) then pays for no pathlib or typing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def code_location() -> Path:
    """The folder this hvdflow package was imported from (a checkout's ``src/`` or a site-packages)."""
    return Path(__file__).resolve().parent.parent


def with_this_hvdflow(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with this hvdflow (:func:`code_location`) first on PYTHONPATH, so that a ``python -m hvdflow...`` it
    starts imports the very code the caller imported, never a pip-installed or older copy."""
    root = str(code_location())
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return {**env, "PYTHONPATH": os.pathsep.join([root, *rest])}
