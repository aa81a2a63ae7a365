"""Images without a registry: the archive of a locked image (``hvdflow image save``) and the profile's word for a
site that has no registry (:data:`NO_REGISTRY`). Loading an archive is the runtime's (udocker's
:mod:`hvdflow.runtime.udocker.loaded`)."""

from __future__ import annotations

from pathlib import Path

from hvdflow.errors import ImageError, RegistryError
from hvdflow.images.archive import save_archive
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.lockfile import check_against_lock, read_lock
from hvdflow.images.registry import Manifest, resolve_manifest

NO_REGISTRY = "none"
"""The profile's ``registry`` value of a site without one: images come only from ``hvdflow image load``."""


def save_image(spec: ImageSpec, profile_registry: str, lock_path: Path, out: Path) -> Manifest:
    """Write the image the lock pins for ``spec`` to the OCI archive ``out``; refuse a tag that moved.

    The image comes from its catalogue entry's registry if it names one, else from the profile's."""
    entry = read_lock(lock_path).get(spec.name)
    if entry is None:
        raise ImageError(f"image {spec.name} is not in {lock_path}: pull it first (`hvdflow image pull {spec.name}`), "
                         "so that the archive holds the digest your runs use")
    credentials = spec.credentials()
    manifest = resolve_manifest(spec.registry_url(profile_registry), spec.repository, spec.tag, credentials=credentials)
    check_against_lock(lock_path, spec.name, spec.reference, manifest.digest, update=False)
    try:
        save_archive(manifest, spec.tag, out, credentials)
    except RegistryError as exc:
        raise ImageError(f"saving image {spec.name} to {out}: {exc}") from None
    return manifest
