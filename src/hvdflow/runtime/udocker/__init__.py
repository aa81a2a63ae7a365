"""The udocker runtime: its settings (``settings``), the commands it runs in a created container and the GPU set-up
of a node (``runtime``), and its image store (``store``). udocker's client, modes and proot, which the image build
also uses, are in :mod:`hvdflow.images`."""

from hvdflow.runtime.kind import RuntimeKind
from hvdflow.runtime.udocker.runtime import udocker_recorded_engine, udocker_runtime
from hvdflow.runtime.udocker.settings import SCHEMA, udocker_options
from hvdflow.runtime.udocker.store import udocker_store

KIND = RuntimeKind("udocker", SCHEMA, udocker_options, udocker_runtime, udocker_recorded_engine, udocker_store)
"""What the registry knows of udocker."""
