"""Where hvdflow's in-container code runs: in a udocker container (:mod:`.udocker`), or natively in a host venv with
the same stack (:mod:`.native`, its venv: :mod:`.native_venv`).

Every caller gets its runtime from the one factory (:func:`make_runtime`, :func:`runtime_for`) and uses it through
the :class:`Runtime` protocol only, so launchers and pipeline steps do not know which one a profile chose; the
native runtime exists to measure what the container costs.
"""

from hvdflow.launch.runtime.base import Runtime, expose_gpus, make_runtime, recorded_engine, runtime_for, setup_log
from hvdflow.launch.runtime.settings import RuntimeSettings

__all__ = ["Runtime", "RuntimeSettings", "expose_gpus", "make_runtime", "recorded_engine", "runtime_for", "setup_log"]
