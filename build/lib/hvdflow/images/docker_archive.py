"""Legacy ``docker save`` archives (Docker before 25), turned into OCI archives so that they load like any other.

Such an archive holds an image's config and its layers, uncompressed, listed in ``manifest.json``, but no registry
manifest and so no digest to pin. hvdflow writes the OCI manifest for it (the config and the layers as they are,
canonical JSON): the same archive always gives the same manifest digest, which the lock pins like a pulled one. It is
not the digest the image has in a registry, whose layers are compressed. Every layer is checked against the config's
``diff_ids`` before anything is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Optional

from hvdflow.errors import ImageError
from hvdflow.images.archive import MEDIA_INDEX, REF_NAME, BlobSource, member_name, write_oci_tar

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


def is_docker_archive(path: Path) -> bool:
    """Whether ``path`` is a tar with a legacy ``docker save`` layout (``manifest.json``, no ``index.json``)."""
    try:
        with tarfile.open(path, "r:*") as tar:
            names = {member_name(m) for m in tar.getmembers()}
    except (OSError, tarfile.TarError):
        return False
    return "manifest.json" in names and "index.json" not in names


def _choose(entries: Any, tag: Optional[str], path: Path) -> dict[str, Any]:
    if not isinstance(entries, list) or not entries:
        raise ImageError(f"{path}: manifest.json lists no image")
    if len(entries) == 1:
        return dict(entries[0])
    matching = [e for e in entries if tag is not None and any(str(t).endswith(f":{tag}") for t in e.get("RepoTags") or [])]
    if len(matching) != 1:
        tags = [t for e in entries for t in e.get("RepoTags") or []]
        raise ImageError(f"{path} holds {len(entries)} images (tagged {', '.join(tags) or 'nothing'}); none is uniquely "
                         f"tagged {tag!r}")
    return dict(matching[0])


def _sha256(handle: BinaryIO) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        sha.update(chunk)
        size += len(chunk)
    return "sha256:" + sha.hexdigest(), size


def convert_docker_archive(path: Path, out: Path, tag: Optional[str]) -> str:
    """Write the image of the legacy ``docker save`` archive ``path`` (the one tagged ``tag`` if it holds several) as
    an OCI archive at ``out``, named ``tag``; return its manifest digest. ImageError names the archive and the part
    that is wrong."""
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise ImageError(f"{path}: not a readable tar archive ({exc})") from None
    with tar:
        members = {member_name(m): m for m in tar.getmembers()}

        def member(name: str) -> BinaryIO:
            handle = tar.extractfile(members[name]) if name in members else None
            if handle is None:
                raise ImageError(f"{path}: {name}, named in manifest.json, is missing from the archive")
            return handle  # type: ignore[return-value]

        try:
            entry = _choose(json.loads(member("manifest.json").read()), tag, path)
            config = member(str(entry["Config"])).read()
            diff_ids = list(json.loads(config)["rootfs"]["diff_ids"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ImageError(f"{path}: manifest.json or the image config it names is not Docker's ({exc!r})") from None
        layers = [str(name) for name in entry.get("Layers") or []]
        if len(layers) != len(diff_ids):
            raise ImageError(f"{path}: {len(layers)} layers, but the image config lists {len(diff_ids)} diff_ids")
        descriptors = []
        for name, diff_id in zip(layers, diff_ids):
            digest, size = _sha256(member(name))
            if digest != diff_id:
                raise ImageError(f"{path}: layer {name} has content of digest {digest}, the image config says "
                                 f"{diff_id}; the archive is corrupt or was altered, nothing was loaded")
            descriptors.append({"mediaType": MEDIA_LAYER, "digest": digest, "size": size})
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        manifest = json.dumps({"schemaVersion": 2, "mediaType": MEDIA_MANIFEST,
                               "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config)},
                               "layers": descriptors}, sort_keys=True, separators=(",", ":")).encode()
        manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        descriptor: dict[str, Any] = {"mediaType": MEDIA_MANIFEST, "digest": manifest_digest, "size": len(manifest)}
        if tag is not None:
            descriptor["annotations"] = {REF_NAME: tag}
        blobs: list[BlobSource] = [(d.split(":", 1)[1], len(data), lambda data=data: io.BytesIO(data))
                                   for d, data in ((manifest_digest, manifest), (config_digest, config))]
        blobs += [(str(layer["digest"]).split(":", 1)[1], int(layer["size"]), lambda name=name: member(name))
                  for name, layer in zip(layers, descriptors)]
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}-", delete=False) as raw:
            partial = Path(raw.name)
        try:
            write_oci_tar(partial, {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [descriptor]}, blobs)
            partial.replace(out)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return manifest_digest
