"""The one list of runtime kinds: a new runtime is its folder beside ``udocker/`` (a package exporting its ``KIND``)
and its line in :data:`RUNTIME_FOLDERS`, found by name as Snakemake finds its executor plugins."""

from __future__ import annotations

from importlib import import_module

from hvdflow.runtime.kind import RuntimeKind

RUNTIME_FOLDERS = (
    "hvdflow.runtime.udocker",
    "hvdflow.runtime.native",
)
"""The kinds' folders, one line each; the first is the one a profile's pull and image check use."""


def _kind(folder: str) -> RuntimeKind:
    kind = getattr(import_module(folder), "KIND", None)
    if not isinstance(kind, RuntimeKind):
        raise TypeError(f"{folder} exports no KIND (a hvdflow.runtime.kind.RuntimeKind)")
    return kind


KINDS: dict[str, RuntimeKind] = {kind.name: kind for kind in map(_kind, RUNTIME_FOLDERS)}
"""The profile's ``runtime.kind`` → what its folder declares."""
