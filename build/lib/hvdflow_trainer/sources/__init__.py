"""Dataset source adapters, by the name ``datasets.<name>.source`` gives in the config (see common.py), or a user's
own reader where the source is a mapping (user_reader.py)."""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Tuple, Union

from . import bigearthnet, digits, imagefolder, user_reader

SOURCES: Dict[str, Tuple[Callable, Callable]] = {  # type: ignore[type-arg]
    "sklearn-digits": (digits.list_samples, digits.reader),
    "bigearthnet-v1": (bigearthnet.list_v1, bigearthnet.reader),
    "bigearthnet-v2": (bigearthnet.list_v2, bigearthnet.reader),
    "image-folder": (imagefolder.list_samples, imagefolder.reader),
}


def adapter(source: Union[str, Mapping[str, object]]) -> Tuple[Callable, Callable]:  # type: ignore[type-arg]
    """``(list_samples, reader)`` of a source (the user's reader for a mapping); ValueError naming the known ones
    for any other."""
    if not isinstance(source, str):
        return user_reader.list_samples, user_reader.reader
    if source not in SOURCES:
        raise ValueError("unknown dataset source %r; known: %s" % (source, ", ".join(sorted(SOURCES))))
    return SOURCES[source]
