"""Images without a registry, udocker's side: load an archive into udocker, find the loaded image again.

A site with no registry access (an air-gapped cluster) gets its images as files: ``hvdflow image save`` writes the
digest the lock pins, ``hvdflow image load`` checks every blob, holds the digest against the lock, loads the image
into the user's udocker and records it under ``.hvdflow/loaded/<digest>.json``. A profile with ``registry: none``
then takes the image the lock pins from that record, its layers hashed again, and never opens a connection. A
legacy ``docker save`` archive (Docker before 25) is converted to an OCI archive first (``docker_archive``).

udocker 1.3.17 stores a loaded OCI image the old (v1) way: no manifest, the layers as ``layers/<hex>.layer`` and
their order in the tag's ``ancestry``, so hvdflow keeps the manifest's bytes itself and checks both.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from hvdflow.errors import ImageError, RegistryError
from hvdflow.files.atomic import write_json_atomic
from hvdflow.files.filelock import exclusive_lock
from hvdflow.images.archive import read_archive
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.docker_archive import convert_docker_archive, is_docker_archive
from hvdflow.images.lockfile import check_against_lock, read_lock, write_lock_entry
from hvdflow.images.offline import NO_REGISTRY
from hvdflow.images.registry import Manifest, parse_manifest
from hvdflow.runtime.udocker.client import Udocker
from hvdflow.runtime.udocker.pull import PULL_LOCK_TIMEOUT, stored_json, tag_dir, verify_blobs


def _record_path(udocker: Udocker, digest: str) -> Path:
    return udocker.state_dir / "loaded" / f"{digest.split(':', 1)[1]}.json"


def _layer_file(udocker: Udocker, digest: str) -> Path:
    return udocker.udocker_dir / "layers" / f"{digest.split(':', 1)[1]}.layer"


def _verify_loaded(udocker: Udocker, spec: ImageSpec, manifest: Manifest) -> None:
    """Check that udocker holds ``manifest``'s layers, in its order, under ``spec``'s tag, each with its digest."""
    ancestry_path, ancestry = stored_json(udocker, spec, "ancestry")
    expected = [digest.split(":", 1)[1] for digest, _ in reversed(manifest.layers)]
    if ancestry != expected:
        raise ImageError(f"image {spec.reference}: udocker in {udocker.udocker_dir} does not hold the layers of "
                         f"{manifest.digest} under that tag (found {ancestry_path}: {ancestry}); load it again with "
                         f"`hvdflow image load {spec.name} ARCHIVE`")
    verify_blobs(manifest, spec.reference, lambda digest: _layer_file(udocker, digest))


def load_image(udocker: Udocker, spec: ImageSpec, archive: Path, lock_path: Path, update_lock: bool = False) -> Manifest:
    """Load ``spec``'s image from the OCI archive ``archive`` into udocker, checked blob by blob and against the lock.

    A legacy ``docker save`` archive is first written as an OCI archive beside udocker's state (a temporary copy of
    the image; :mod:`hvdflow.images.docker_archive` says which digest it gets) and loaded from there."""
    udocker.prepare()
    if not is_docker_archive(archive):
        return _load_oci(udocker, spec, archive, archive, lock_path, update_lock)
    with tempfile.TemporaryDirectory(dir=udocker.state_dir, prefix=".docker-archive-") as tmp:
        converted = Path(tmp) / "image.tar"
        convert_docker_archive(archive, converted, spec.tag)
        return _load_oci(udocker, spec, converted, archive, lock_path, update_lock)


def _load_oci(udocker: Udocker, spec: ImageSpec, archive: Path, named: Path, lock_path: Path, update_lock: bool
              ) -> Manifest:
    """Load the OCI archive ``archive``, which the user gave as ``named``."""
    image = read_archive(archive, spec.repository, spec.tag)
    manifest = image.manifest
    if named != archive:
        manifest = dataclasses.replace(manifest, registry_url=f"docker-archive:{named.resolve()}")
    with exclusive_lock(udocker.state_dir / "pull.lock", PULL_LOCK_TIMEOUT, f"loading {spec.reference}"):
        must_write = check_against_lock(lock_path, spec.name, spec.reference, manifest.digest, update_lock,
                                        archive=named)
        if tag_dir(udocker, spec).exists():
            udocker.check("rmi", spec.reference)
        proc = udocker.call("load", "-i", str(archive), spec.repository)
        # udocker prints the tags it loaded as a Python list, after one "Info: adding layer" line per layer
        names = [line.strip() for line in (proc.stdout or "").splitlines() if line.strip().startswith("[")]
        if proc.returncode != 0 or repr([spec.reference]) not in names:
            udocker.call("rmi", spec.reference)
            raise ImageError(
                f"udocker load -i {archive} (exit {proc.returncode}) loaded {names or 'nothing'}, not {spec.reference}: "
                f"the archive names its image {image.ref_name!r}, udocker tags it by that name, and the catalogue "
                f"entry {spec.name} has tag {spec.tag!r}. {(proc.stderr or '').strip()[-1000:]}"
            )
        try:
            _verify_loaded(udocker, spec, manifest)
        except ImageError:
            udocker.call("rmi", spec.reference)
            raise
        record = _record_path(udocker, manifest.digest)
        record.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record, {"reference": spec.reference, "digest": manifest.digest, "source": manifest.registry_url,
                                   "media_type": manifest.media_type, "manifest": manifest.raw.decode()})
        if must_write:
            write_lock_entry(lock_path, spec.name, spec.reference, manifest.digest)
    return manifest


def loaded_image(udocker: Udocker, spec: ImageSpec, lock_path: Path) -> Manifest:
    """The image the lock pins for ``spec``, as loaded from an archive, its layers hashed again; no network."""
    entry = read_lock(lock_path).get(spec.name)
    load_hint = f"`hvdflow image load {spec.name} ARCHIVE` (an archive from `hvdflow image save {spec.name} ARCHIVE`)"
    if entry is None or entry.reference != spec.reference:
        raise ImageError(f"image {spec.name} ({spec.reference}): the profile has no registry (registry: {NO_REGISTRY}) "
                         f"and {lock_path} pins no digest for it; run {load_hint}")
    udocker.prepare()
    with exclusive_lock(udocker.state_dir / "pull.lock", PULL_LOCK_TIMEOUT, f"checking {spec.reference}"):
        path = _record_path(udocker, entry.digest)
        if not path.exists():
            raise ImageError(f"image {spec.name} ({spec.reference}@{entry.digest}, pinned in {lock_path}) is not loaded "
                             f"into {udocker.udocker_dir}, and the profile has no registry (registry: {NO_REGISTRY}); "
                             f"run {load_hint}")
        record = json.loads(path.read_text())
        what = f"image {spec.reference} loaded from {record['source']}"
        try:
            manifest = parse_manifest(record["manifest"].encode(), record["media_type"], record["source"],
                                      spec.repository, what, entry.digest)
        except RegistryError as exc:
            raise ImageError(f"{path}: {exc}") from None
        _verify_loaded(udocker, spec, manifest)
    return manifest
