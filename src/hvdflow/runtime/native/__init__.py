"""The native runtime: its settings (``settings``), commands run by a host venv with the image's packages
(``runtime``) and that venv (``venv``). Its images are pulled and checked in udocker's store: the image check runs
the image itself, and the venv is built from the image's recipe."""

from hvdflow.runtime.kind import RuntimeKind
from hvdflow.runtime.native.runtime import native_recorded_engine, native_runtime, native_setup_log
from hvdflow.runtime.native.settings import SCHEMA, native_options
from hvdflow.runtime.udocker.store import udocker_store

KIND = RuntimeKind("native", "a host venv with the image's packages, to measure the container's cost",
                   SCHEMA, native_options, native_runtime, native_recorded_engine, udocker_store,
                   setup_log=native_setup_log)
"""What the registry knows of the native runtime."""
