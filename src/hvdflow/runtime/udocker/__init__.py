"""The udocker runtime: its settings (``settings``), the commands it runs in a created container and the GPU set-up
of a node (``runtime``), its image store (``store``: ``pull``, ``loaded``), udocker's command line (``client``,
``launcher``) and its checks of a host for doctor (``checks``). udocker's modes, proot tools, runc probe and each
rank's mode chooser, which the image build and every rank's start use too, are in :mod:`hvdflow.images`."""

from hvdflow.runtime.kind import RuntimeKind
from hvdflow.runtime.udocker.checks import udocker_host_checks
from hvdflow.runtime.udocker.runtime import udocker_recorded_engine, udocker_runtime
from hvdflow.runtime.udocker.settings import SCHEMA, udocker_options
from hvdflow.runtime.udocker.store import udocker_store

KIND = RuntimeKind("udocker", "containers without root or admin",
                   SCHEMA, udocker_options, udocker_runtime, udocker_recorded_engine, udocker_store,
                   udocker_host_checks)
"""What the registry knows of udocker."""
