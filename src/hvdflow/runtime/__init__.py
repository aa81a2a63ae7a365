"""Where hvdflow's in-container code runs, and where its images come from: the runtime kinds, each in its folder
(``udocker/``: a udocker container; ``native/``: a host venv with the image's packages, to measure the container's
cost), listed in :mod:`.registry`.

Every caller gets its runtime from the one factory (:func:`make_runtime`, :func:`runtime_for`), its images from the
runtime's store (:func:`store_of`, :func:`image_store`) and the profile's ``runtime:`` section checked by
:func:`runtime_settings`, and uses them through the :class:`Runtime` and :class:`ImageStore` protocols only, so
launchers, pipeline steps, doctor and rerun do not know which kind a profile chose.

Floor 2: imports ``errors``, ``code_location``, ``files`` and ``images`` only (never ``config``: the profile's loader
imports this room to check its ``runtime:`` section), and ``hvdflow_wire``.
"""

from hvdflow.runtime.base import (
    FLAT_KEYS,
    as_kind,
    expose_gpus,
    host_checks,
    image_store,
    make_runtime,
    recorded_engine,
    runtime_for,
    runtime_settings,
    section_from_flat,
    section_schema,
    setup_log,
    store_of,
)
from hvdflow.runtime.kind import Runtime, RuntimeKind
from hvdflow.runtime.settings import RuntimeSettings
from hvdflow.runtime.store import ImageStore

__all__ = ["FLAT_KEYS", "ImageStore", "Runtime", "RuntimeKind", "RuntimeSettings", "as_kind", "expose_gpus",
           "host_checks", "image_store", "make_runtime", "recorded_engine", "runtime_for", "runtime_settings",
           "section_from_flat", "section_schema", "setup_log", "store_of"]
