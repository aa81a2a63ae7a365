"""udocker's :class:`~hvdflow.runtime.store.ImageStore`: images pulled by digest or loaded from an archive into
one user's udocker directory, verified there, and its containers (P1, R1, or both under ``execmode: auto``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.files.heartbeat import size_text, tree_bytes
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.registry import Manifest
from hvdflow.runtime.udocker.client import Udocker
from hvdflow.runtime.udocker.loaded import load_image, loaded_image
from hvdflow.runtime.udocker.pull import ContainerRecord, ensure_container, pinned_container, pull_image


@dataclass(frozen=True)
class UdockerStore:
    """The images and containers of the udocker directory ``udocker.udocker_dir``."""

    udocker: Udocker

    @property
    def location(self) -> Path:
        """udocker's directory."""
        return self.udocker.udocker_dir

    @property
    def checks_dir(self) -> Path:
        """The image checks' cache, in hvdflow's state beside udocker's."""
        return self.udocker.state_dir / "checks"

    def pull(self, spec: ImageSpec, registry: str, lock: Path, update_lock: bool = False) -> Manifest:
        """``udocker pull`` by the digest the registry serves, held against the lock and verified blob by blob."""
        return pull_image(self.udocker, spec, registry, lock, update_lock=update_lock)

    def load(self, spec: ImageSpec, archive: Path, lock: Path, update_lock: bool = False) -> Manifest:
        """``udocker load`` of an OCI (or legacy ``docker save``) archive, checked blob by blob and against the lock."""
        return load_image(self.udocker, spec, archive, lock, update_lock=update_lock)

    def loaded(self, spec: ImageSpec, lock: Path) -> Manifest:
        """The loaded image the lock pins, its layers hashed again."""
        return loaded_image(self.udocker, spec, lock)

    def pinned(self, spec: ImageSpec, lock: Path, execmode: Optional[str] = None) -> Optional[ContainerRecord]:
        """The container udocker still holds of the pinned digest in the mode asked."""
        return pinned_container(self.udocker, spec, lock, execmode)

    def create(self, spec: ImageSpec, manifest: Manifest, execmode: Optional[str] = None) -> ContainerRecord:
        """The container(s) of the mode (``auto``: P1's, and R1's where this node can run it)."""
        return ensure_container(self.udocker, spec, manifest, execmode)

    def progress(self) -> str:
        """The bytes in udocker's layer store (it grows as layers arrive). Not the containers: walking every created
        container's tree (1.8 GB, tens of thousands of files each) took longer than a beat."""
        return f"{size_text(tree_bytes(self.udocker.udocker_dir / 'layers'))} in udocker's layers"


def udocker_store(location: Path, allow_root: bool) -> UdockerStore:
    """The store of the udocker directory ``location`` (UdockerError as root unless ``allow_root``)."""
    return UdockerStore(Udocker(location, allow_root=allow_root))
