"""OCI archives: an image moved as one file, its manifest digest intact.

An archive is a tar of an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/<hex>``), the format
``skopeo copy ... oci-archive:FILE`` writes, ``docker save`` writes since Docker 25, and ``udocker load`` reads.
``save_archive`` copies the manifest's bytes as the registry served them, so the digest a lock pins is the digest
the archive holds; the tar is deterministic (sorted members, numeric owners, mtime 0). ``read_archive`` checks
every byte before anything is loaded: the manifest against its descriptor's digest and every blob against its own.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Tuple

from hvdflow.errors import ImageError, RegistryError
from hvdflow.images.registry import INDEX_TYPES, Manifest, fetch_blob, linux_amd64, parse_manifest
from hvdflow.images.registry_auth import Credentials

REF_NAME = "org.opencontainers.image.ref.name"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
_LAYOUT = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()


def member_name(member: tarfile.TarInfo) -> str:
    """A tar member's name without the ``./`` that ``tar -C DIR -cf OUT .`` puts before it."""
    return member.name[2:] if member.name.startswith("./") else member.name


def archive_source(path: Path) -> str:
    """How a manifest loaded from the archive at ``path`` names where it came from."""
    return f"oci-archive:{path.resolve()}"


def _add(tar: tarfile.TarFile, name: str, size: int | None = None, content: BinaryIO | None = None) -> None:
    """Add a member with fixed owner, mode and mtime: a directory when ``size`` is None, else a file."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if size is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = size, 0o644
    tar.addfile(info, content)


BlobSource = Tuple[str, int, Callable[[], BinaryIO]]
"""A blob to write: its sha256 in hex, its size, and how to open it."""


def write_oci_tar(path: Path, index: dict[str, Any], blobs: Iterable[BlobSource]) -> None:
    """Write an OCI image layout as a tar at ``path``: ``index.json``, ``oci-layout`` and the blobs, deterministic
    (sorted members, numeric owners, mtime 0)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "blobs")
        _add(tar, "blobs/sha256")
        for hexdigest, size, opener in sorted({b[0]: b for b in blobs}.values(), key=lambda b: b[0]):
            with opener() as handle:
                _add(tar, f"blobs/sha256/{hexdigest}", size, handle)
        for name, data in (("index.json", json.dumps(index, sort_keys=True).encode()), ("oci-layout", _LAYOUT)):
            _add(tar, name, len(data), io.BytesIO(data))


def save_archive(manifest: Manifest, ref_name: str, out: Path, credentials: Credentials | None = None) -> None:
    """Write the image of ``manifest`` as an OCI archive at ``out``, its blobs fetched from the manifest's registry
    (as ``credentials``' user when given).

    Every blob is checked against its digest as it arrives; the archive is assembled beside ``out`` and renamed into
    place, so an interrupted save never leaves a file that looks complete.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    try:
        for digest in sorted(set(manifest.blobs)):
            fetch_blob(manifest.registry_url, manifest.repository, digest, work / digest.split(":", 1)[1],
                       credentials=credentials)
        index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX,
                 "manifests": [{"mediaType": manifest.media_type, "digest": manifest.digest, "size": len(manifest.raw),
                                "annotations": {REF_NAME: ref_name}}]}
        (work / manifest.digest.split(":", 1)[1]).write_bytes(manifest.raw)
        tmp = work / "archive.tar"
        hexdigests = {d.split(":", 1)[1] for d in (manifest.digest, *manifest.blobs)}
        write_oci_tar(tmp, index, [(h, (work / h).stat().st_size, lambda h=h: open(work / h, "rb")) for h in hexdigests])
        os.replace(tmp, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def archive_layout(layout: Path, out: Path) -> None:
    """Write the OCI image layout directory ``layout`` (a built image) as an OCI archive at ``out``: every blob and
    ``index.json`` as they are, so the archive holds the layout's digest. Written beside ``out`` and renamed into
    place, so an interrupted write never leaves a file that looks complete."""
    index = json.loads((layout / "index.json").read_text())
    blobs = sorted((layout / "blobs" / "sha256").iterdir())
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}-")
    os.close(fd)
    try:
        write_oci_tar(Path(tmp), index, [(blob.name, blob.stat().st_size, lambda blob=blob: open(blob, "rb"))
                                         for blob in blobs])
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


@dataclass(frozen=True)
class ArchivedImage:
    """An image found in an archive and verified there: its manifest and the name the archive gives it."""

    path: Path
    manifest: Manifest
    ref_name: str | None


def _hash_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    handle: BinaryIO | None = tar.extractfile(member)
    if handle is None:
        raise ImageError(f"{tar.name}: {member.name} is not a regular file")
    sha = hashlib.sha256()
    for chunk in iter(lambda: handle.read(1 << 20), b""):  # type: ignore[union-attr]
        sha.update(chunk)
    return "sha256:" + sha.hexdigest()


def _read_json(tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str, path: Path) -> Any:
    handle = tar.extractfile(members[name])
    assert handle is not None
    try:
        return json.loads(handle.read())
    except ValueError as exc:
        raise ImageError(f"{path}: {name} is not valid JSON ({exc})") from None


def _choose(index: dict[str, Any], wanted_ref: str | None, path: Path) -> dict[str, Any]:
    manifests = index.get("manifests") or []
    if not manifests:
        raise ImageError(f"{path}: index.json lists no image")
    if len(manifests) == 1:
        return dict(manifests[0])
    names = [m.get("annotations", {}).get(REF_NAME) for m in manifests]
    matching = [m for m, name in zip(manifests, names) if wanted_ref is not None and name == wanted_ref]
    if len(matching) != 1:
        raise ImageError(f"{path} holds {len(manifests)} images (named {', '.join(map(str, names))}); "
                         f"none is uniquely named {wanted_ref!r}")
    return dict(matching[0])


def read_archive(path: Path, repository: str, wanted_ref: str | None = None) -> ArchivedImage:
    """The image in the OCI archive at ``path``, every blob checked against its digest.

    ``repository`` is the name the manifest is given (archives do not hold one); ``wanted_ref`` picks an image by
    its ``ref.name`` when the archive holds several. Raises ImageError naming the archive and the first part wrong.
    """
    try:
        tar = tarfile.open(path, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise ImageError(f"{path}: not a readable tar archive ({exc})") from None
    with tar:
        members = {member_name(m): m for m in tar.getmembers()}
        if "index.json" not in members or "oci-layout" not in members:
            legacy = " (it is a legacy `docker save` archive: `hvdflow image load` takes it, writing its OCI manifest; " \
                     "or save it with Docker 25 or later)" if "manifest.json" in members else ""
            raise ImageError(f"{path}: not an OCI archive, it has no index.json and oci-layout{legacy}")

        def blob(digest: str) -> tarfile.TarInfo:
            algorithm, _, hexdigest = digest.partition(":")
            member = members.get(f"blobs/{algorithm}/{hexdigest}")
            if member is None:
                raise ImageError(f"{path}: blob {digest} is missing from the archive")
            return member

        def read_blob(digest: str) -> bytes:
            handle = tar.extractfile(blob(digest))
            assert handle is not None
            return handle.read()

        descriptor = _choose(_read_json(tar, members, "index.json", path), wanted_ref, path)
        what = f"image {descriptor.get('digest')} in {path}"
        if descriptor.get("mediaType") in INDEX_TYPES:
            nested = read_blob(str(descriptor["digest"]))
            _check_digest(nested, str(descriptor["digest"]), path)
            ref = descriptor.get("annotations", {}).get(REF_NAME)
            descriptor = {"digest": linux_amd64(json.loads(nested), what), "annotations": {REF_NAME: ref}}
        digest = str(descriptor["digest"])
        raw = read_blob(digest)
        try:
            media_type = str(json.loads(raw).get("mediaType") or descriptor.get("mediaType"))
            manifest = parse_manifest(raw, media_type, archive_source(path), repository, what, digest)
        except RegistryError as exc:
            raise ImageError(f"{path}: {exc}") from None
        for layer_digest, size in (*manifest.layers, (manifest.config_digest, -1)):
            member = blob(layer_digest)
            if size >= 0 and member.size != size:
                raise ImageError(f"{path}: blob {layer_digest} has {member.size} bytes, the manifest says {size}")
            actual = _hash_member(tar, member)
            if actual != layer_digest:
                raise ImageError(f"{path}: blob {layer_digest} has content of digest {actual}; the archive is "
                                 "corrupt or was altered, nothing was loaded")
        return ArchivedImage(path, manifest, descriptor.get("annotations", {}).get(REF_NAME))


def _check_digest(data: bytes, digest: str, path: Path) -> None:
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise ImageError(f"{path}: blob {digest} has content of digest {actual}; nothing was loaded")
