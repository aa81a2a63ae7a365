"""The image record: the container a runtime runs, made of a pulled (or loaded), verified image by udocker's store
(every kind's images come through it), as the pull step writes it and every later step reads it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional

from hvdflow.errors import ImageError
from hvdflow.images.modes import AUTO_FALLBACK_MODE, AUTO_MODE, AUTO_RUNC_MODE
from hvdflow_wire.values import from_json, read_object

NO_RUNC_CONTAINER = "no R1 container was made (the node that pulled the image could not run R1: its pull_image log says why)"
"""Why ``execmode: auto``'s record names no R1 container: the runtime's and the benchmark's words alike."""


@dataclass(frozen=True)
class ContainerRecord:
    """A created, verified container: what later steps run in."""

    image: str
    reference: str
    registry: str
    digest: str
    container: str
    execmode: str
    udocker_dir: str
    created: float
    runc_container: Optional[str] = None
    """Under ``execmode: auto``: the R1 container made beside ``container`` (P1's, every node's fallback), where the
    node that made them could run R1; None otherwise."""

    def to_json(self) -> str:
        """The record as JSON, as written to the state directory and to the pipeline's image outputs."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: Path) -> "ContainerRecord":
        """The record in ``path`` (a record from before ``runc_container`` existed has none); WireError naming the
        file and what is wrong."""
        return from_json(cls, {"runc_container": None, **read_object(str(path))}, str(path))


def container_in_mode(record: ContainerRecord, mode: str) -> ContainerRecord:
    """The record of ``record``'s container that runs ``mode``: its own, or one of ``auto``'s two (the benchmark
    sets the modes side by side); ImageError naming why there is none."""
    if record.execmode == mode:
        return record
    if record.execmode == AUTO_MODE and mode == AUTO_FALLBACK_MODE:
        return replace(record, execmode=mode, runc_container=None)
    if record.execmode == AUTO_MODE and mode == AUTO_RUNC_MODE and record.runc_container is not None:
        return replace(record, container=record.runc_container, execmode=mode, runc_container=None)
    if record.execmode == AUTO_MODE:
        raise ImageError(f"image {record.image}: {NO_RUNC_CONTAINER}")
    raise ImageError(f"image {record.image}: no {mode} container was made, only execmode {record.execmode}'s; set "
                     f"execmode: auto or {mode} in the profile")
