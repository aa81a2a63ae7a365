"""Where hvdflow's in-container code runs: in a udocker container (:mod:`.udocker`), or natively in a host venv with
the same stack (:mod:`.native`, its venv: :mod:`.native_venv`); and where its images come from (:mod:`.store`,
udocker's: :mod:`.udocker_store`).

Every caller gets its runtime from the one factory (:func:`make_runtime`, :func:`runtime_for`) and its images from
the runtime's store (:func:`image_store`, :func:`image_store_of`), and uses them through the :class:`Runtime` and
:class:`ImageStore` protocols only, so launchers and pipeline steps do not know which one a profile chose; the
native runtime exists to measure what the container costs.
"""

from hvdflow.launch.runtime.base import (
    Runtime,
    expose_gpus,
    image_store,
    image_store_of,
    make_runtime,
    recorded_engine,
    runtime_for,
    setup_log,
)
from hvdflow.launch.runtime.settings import RuntimeSettings
from hvdflow.launch.runtime.store import ImageStore

__all__ = ["ImageStore", "Runtime", "RuntimeSettings", "expose_gpus", "image_store", "image_store_of", "make_runtime",
           "recorded_engine", "runtime_for", "setup_log"]
