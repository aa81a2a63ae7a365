"""Dataset source adapters, by the name ``datasets.<name>.source`` gives in the config (see common.py)."""

from __future__ import annotations

from typing import Callable, Dict, Tuple

from . import bigearthnet, digits, imagefolder

SOURCES: Dict[str, Tuple[Callable, Callable]] = {  # type: ignore[type-arg]
    "sklearn-digits": (digits.list_samples, digits.reader),
    "bigearthnet-v1": (bigearthnet.list_v1, bigearthnet.reader),
    "bigearthnet-v2": (bigearthnet.list_v2, bigearthnet.reader),
    "image-folder": (imagefolder.list_samples, imagefolder.reader),
}


def adapter(source: str) -> Tuple[Callable, Callable]:  # type: ignore[type-arg]
    """``(list_samples, reader)`` of a source; ValueError naming the known ones for any other."""
    if source not in SOURCES:
        raise ValueError("unknown dataset source %r; known: %s" % (source, ", ".join(sorted(SOURCES))))
    return SOURCES[source]
