"""Where a runtime keeps its images and makes the containers its jobs run in (:class:`ImageStore`): the one door the
pull step, ``hvdflow image``, ``hvdflow doctor`` and ``hvdflow rerun`` use, so that none of them knows the engine.

Every store checks what it holds against the lock file's digest (a pulled image's manifest and blobs, a loaded
archive's layers) before a container is made from it; :func:`hvdflow.runtime.base.image_store` builds the one
a runtime kind uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol, runtime_checkable

from hvdflow.images.catalog import ImageSpec
from hvdflow.images.registry import Manifest
from hvdflow.runtime.record import ContainerRecord


@runtime_checkable
class ImageStore(Protocol):
    """A runtime's images and containers, in one folder (the profile's ``udocker_dir`` for udocker)."""

    @property
    def location(self) -> Path:
        """The folder the store keeps its images and containers in."""
        ...

    @property
    def checks_dir(self) -> Path:
        """Where the image checks of its images are cached (by digest)."""
        ...

    def pull(self, spec: ImageSpec, registry: str, lock: Path, update_lock: bool = False) -> Manifest:
        """Resolve ``spec`` at its registry (its own, else ``registry``), hold its digest against ``lock``, fetch and
        verify it; record the digest in ``lock`` if none was. ImageError naming what differs or failed."""
        ...

    def load(self, spec: ImageSpec, archive: Path, lock: Path, update_lock: bool = False) -> Manifest:
        """Load ``spec``'s image from the archive ``archive``, checked blob by blob and against ``lock``."""
        ...

    def loaded(self, spec: ImageSpec, lock: Path) -> Manifest:
        """The image ``lock`` pins for ``spec``, as loaded earlier, its layers hashed again; no network."""
        ...

    def pinned(self, spec: ImageSpec, lock: Path, execmode: Optional[str] = None) -> Optional[ContainerRecord]:
        """The container made earlier from the digest ``lock`` pins, where the store still holds it; else None."""
        ...

    def create(self, spec: ImageSpec, manifest: Manifest, execmode: Optional[str] = None) -> ContainerRecord:
        """The container of ``spec`` at ``manifest``'s digest: made and probed once, then reused; its record."""
        ...

    def progress(self) -> str:
        """A line on how far a pull or load has come (for the step's heartbeat)."""
        ...
