"""A toy second runtime, for the test that adding a runtime is its folder and its line in the registry: the test
copies this folder to ``src/hvdflow/runtime/toy/`` of a tree and adds ``toy`` to ``hvdflow.runtime.registry``.

It runs the image's root filesystem (the one udocker's store made of the pulled, verified image) under ``unshare``:
a user namespace and a mount namespace, the host paths bound at their place, then ``chroot``. Its images come from
udocker's store, as native's do; it has no settings of its own besides the common ``udocker_dir``."""

from hvdflow.runtime.kind import RuntimeKind
from hvdflow.runtime.toy.runtime import toy_options, toy_recorded_engine, toy_runtime
from hvdflow.runtime.udocker.store import udocker_store

KIND = RuntimeKind("toy", "a root filesystem run with unshare, for the suite",
                   {}, toy_options, toy_runtime, toy_recorded_engine, udocker_store)
"""What the registry knows of the toy runtime."""
