"""Write an OCI image layout from a root filesystem directory, deterministically.

The layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) is what ``skopeo copy oci:DIR:TAG`` reads.
Layers are gzip-compressed tar streams with sorted entries, numeric owners and mtimes clamped to a fixed epoch,
so the same tree always gives the same layer digests.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"

PathFilter = Callable[[str], bool]


@dataclass(frozen=True)
class LayerSpec:
    """One layer: the paths of the root filesystem (relative, no leading slash) that ``include`` accepts."""

    name: str
    include: PathFilter


@dataclass
class ImageConfig:
    """The runtime part of an OCI image configuration."""

    env: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=lambda: ["/bin/sh"])
    working_dir: str = "/"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob written into the layout."""

    media_type: str
    digest: str
    size: int

    def descriptor(self) -> dict[str, object]:
        """The OCI descriptor that points at this blob."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def iter_tree(root: Path) -> Iterator[str]:
    """Yield paths under ``root`` (relative) in a deterministic depth-first order, each directory before its content."""

    def visit(rel: str) -> Iterator[str]:
        for name in sorted(os.listdir(root / rel if rel else root)):
            child = f"{rel}/{name}" if rel else name
            yield child
            full = root / child
            if full.is_dir() and not full.is_symlink():
                yield from visit(child)

    yield from visit("")


def _tarinfo(root: Path, rel: str, epoch: int) -> tarfile.TarInfo:
    full = root / rel
    st = full.lstat()
    info = tarfile.TarInfo(rel)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    info.mtime = min(int(st.st_mtime), epoch)
    if stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(full)
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISREG(st.st_mode):
        info.type = tarfile.REGTYPE
        info.size = st.st_size
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    else:
        raise ValueError(f"cannot put {full} into an image layer: unsupported file type")
    return info


class _HashingWriter(io.RawIOBase):
    """A write-only file that hashes and counts what passes through it to ``target``."""

    def __init__(self, target: io.BufferedWriter) -> None:
        self.target = target
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        self.target.write(data)
        return len(data)


def write_layer(root: Path, include: PathFilter, blobs_dir: Path, epoch: int, compresslevel: int = 6) -> tuple[Blob, str]:
    """Write the paths of ``root`` accepted by ``include`` as one gzip layer blob.

    Returns the blob and the layer's diff id (sha256 of the uncompressed tar).
    Hard links inside the layer are kept as hard links, so no file content is stored twice.
    """
    blobs_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=blobs_dir, prefix=".layer-")
    diff_sha = hashlib.sha256()
    seen_inodes: dict[tuple[int, int], str] = {}
    with os.fdopen(fd, "wb") as raw:
        hashing = _HashingWriter(raw)  # type: ignore[arg-type]
        with gzip.GzipFile(fileobj=hashing, mode="wb", compresslevel=compresslevel, mtime=0) as gz:

            class _DiffHasher(io.RawIOBase):
                def writable(self) -> bool:
                    return True

                def write(self, data: bytes) -> int:  # type: ignore[override]
                    diff_sha.update(data)
                    gz.write(data)
                    return len(data)

            with tarfile.open(fileobj=_DiffHasher(), mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[arg-type]
                for rel in iter_tree(root):
                    if not include(rel):
                        continue
                    info = _tarinfo(root, rel, epoch)
                    if info.type == tarfile.REGTYPE:
                        st = (root / rel).lstat()
                        key = (st.st_dev, st.st_ino)
                        if st.st_nlink > 1 and key in seen_inodes:
                            info.type = tarfile.LNKTYPE
                            info.linkname = seen_inodes[key]
                            info.size = 0
                            tar.addfile(info)
                            continue
                        seen_inodes[key] = rel
                        with open(root / rel, "rb") as handle:
                            tar.addfile(info, handle)
                    else:
                        tar.addfile(info)
    digest = "sha256:" + hashing.sha.hexdigest()
    os.chmod(tmp_name, 0o644)
    os.replace(tmp_name, blobs_dir / hashing.sha.hexdigest())
    return Blob(MEDIA_LAYER_GZIP, digest, hashing.size), "sha256:" + diff_sha.hexdigest()


def write_json_blob(obj: object, media_type: str, blobs_dir: Path) -> Blob:
    """Write ``obj`` as canonical JSON into the blob store and return its descriptor."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    hexdigest = hashlib.sha256(data).hexdigest()
    blobs_dir.mkdir(parents=True, exist_ok=True)
    (blobs_dir / hexdigest).write_bytes(data)
    return Blob(media_type, "sha256:" + hexdigest, len(data))


def write_layer_bytes(tar_bytes: bytes, blobs_dir: Path, compresslevel: int = 6) -> tuple[Blob, str]:
    """Store an uncompressed layer tar given as bytes as a gzip blob; return the blob and its diff id."""
    data = gzip.compress(tar_bytes, compresslevel=compresslevel, mtime=0)
    hexdigest = hashlib.sha256(data).hexdigest()
    blobs_dir.mkdir(parents=True, exist_ok=True)
    (blobs_dir / hexdigest).write_bytes(data)
    return Blob(MEDIA_LAYER_GZIP, "sha256:" + hexdigest, len(data)), "sha256:" + hashlib.sha256(tar_bytes).hexdigest()


def assemble_layout(work: Path, layers: list[tuple[str, Blob, str]], config: ImageConfig, tag: str, epoch: int,
                    architecture: str = "amd64") -> Blob:
    """Write config, manifest, index and ``oci-layout`` into ``work`` around layer blobs already stored there.

    ``layers`` are ``(name, blob, diff_id)`` in order, bottom first. Returns the manifest blob.
    """
    blobs = work / "blobs" / "sha256"
    created = _iso(epoch)
    config_obj = {
        "architecture": architecture,
        "os": "linux",
        "created": created,
        "config": {"Env": config.env, "Cmd": config.cmd, "WorkingDir": config.working_dir, "Labels": config.labels},
        "rootfs": {"type": "layers", "diff_ids": [diff_id for _, _, diff_id in layers]},
        "history": [{"created": created, "created_by": f"hvdflow layer {name}"} for name, _, _ in layers],
    }
    config_blob = write_json_blob(config_obj, MEDIA_CONFIG, blobs)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_blob.descriptor(),
        "layers": [blob.descriptor() for _, blob, _ in layers],
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }
    manifest_blob = write_json_blob(manifest, MEDIA_MANIFEST, blobs)
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{**manifest_blob.descriptor(), "annotations": {"org.opencontainers.image.ref.name": tag}}],
    }
    (work / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (work / "index.json").write_text(json.dumps(index, sort_keys=True))
    return manifest_blob


def publish_layout(work: Path, out_dir: Path) -> None:
    """Move a complete layout from ``work`` to ``out_dir``, replacing what was there."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(work, out_dir)


def write_oci_layout(
    root: Path,
    layers: list[LayerSpec],
    config: ImageConfig,
    out_dir: Path,
    tag: str,
    epoch: int,
) -> Blob:
    """Write ``root`` as an OCI image layout in ``out_dir`` tagged ``tag``; return the manifest blob.

    Every path of ``root`` must fall in exactly one layer, checked before anything is written.
    The layout is assembled in a sibling temporary directory and renamed into place, so an interrupted
    write never leaves a layout that looks complete.
    """
    _check_layers_partition(root, layers)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}-"))
    try:
        blobs = work / "blobs" / "sha256"
        written = [(layer.name, *write_layer(root, layer.include, blobs, epoch)) for layer in layers]
        manifest_blob = assemble_layout(work, written, config, tag, epoch)
        publish_layout(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest_blob


def _iso(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_layers_partition(root: Path, layers: list[LayerSpec]) -> None:
    for rel in iter_tree(root):
        owners = [layer.name for layer in layers if layer.include(rel)]
        if len(owners) != 1:
            where = "no layer" if not owners else "layers " + ", ".join(owners)
            raise ValueError(f"{root / rel} falls in {where}; every path must fall in exactly one layer")


def prefix_filter(prefixes: list[str], invert: bool = False) -> PathFilter:
    """A filter accepting paths under any of ``prefixes`` (or, with ``invert``, every other path).

    A directory that is a parent of a prefix belongs to the inverted side only, so each path has one owner.
    """
    clean = [p.strip("/") for p in prefixes]

    def under(rel: str) -> bool:
        return any(rel == p or rel.startswith(p + "/") for p in clean)

    if invert:
        return lambda rel: not under(rel)
    return under
