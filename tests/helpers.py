"""Small real images for the tests, written with hvdflow's OCI code: Debian's static busybox in one layer, and a
built image with one more small layer (another image, the same software)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from hvdflow.images.build.image import BuiltImage
from hvdflow.images.build.oci import Blob, ImageConfig, assemble_layout, publish_layout, write_layer_bytes

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "true", "cat", "ls")


def tiny_tar(marker: str) -> bytes:
    """An uncompressed layer tar: /bin/busybox, applet links, and /marker holding ``marker``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("bin", "etc", "tmp"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        payload = f"{marker}\n".encode()
        info = tarfile.TarInfo("marker")
        info.size, info.mode = len(payload), 0o644
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def build_tiny_layout(out_dir: Path, tag: str, marker: str, broken_tar: bool = False) -> BuiltImage:
    """An OCI layout of the busybox image; ``broken_tar`` cuts the tar in half (digests stay consistent)."""
    tar_bytes = tiny_tar(marker)
    if broken_tar:
        tar_bytes = tar_bytes[: len(tar_bytes) // 2]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out_dir.parent))
    blob, diff_id = write_layer_bytes(tar_bytes, work / "blobs" / "sha256")
    manifest = assemble_layout(work, [("busybox", blob, diff_id)], ImageConfig(cmd=["/bin/sh"]), tag, int(time.time()))
    publish_layout(work, out_dir)
    return BuiltImage(out_dir, tag, manifest.digest)


def marker_tar(marker: str) -> bytes:
    """An uncompressed layer tar holding only ``/marker`` with ``marker`` in it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        payload = f"{marker}\n".encode()
        info = tarfile.TarInfo("marker")
        info.size, info.mode = len(payload), 0o644
        tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def derived_layout(base: BuiltImage, out_dir: Path, tag: str, marker: str) -> BuiltImage:
    """``base`` with a layer holding ``/marker`` on top: another image (its own digest) with the same software.

    The base's blobs are hard-linked, not copied; its config's environment and command are kept.
    """
    def blob(digest: str) -> dict:  # type: ignore[type-arg]
        return json.loads((base.layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_bytes())

    manifest = blob(base.manifest_digest)
    config = blob(manifest["config"]["digest"])
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out_dir.parent))
    blobs = work / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layers = []
    for i, (layer, diff_id) in enumerate(zip(manifest["layers"], config["rootfs"]["diff_ids"], strict=True)):
        hexdigest = layer["digest"].split(":", 1)[1]
        try:
            os.link(base.layout / "blobs" / "sha256" / hexdigest, blobs / hexdigest)
        except OSError:  # another file system
            shutil.copyfile(base.layout / "blobs" / "sha256" / hexdigest, blobs / hexdigest)
        layers.append((f"base-{i}", Blob(layer["mediaType"], layer["digest"], layer["size"]), diff_id))
    layers.append(("marker", *write_layer_bytes(marker_tar(marker), blobs)))
    runtime = config["config"]
    image_config = ImageConfig(env=runtime.get("Env") or [], cmd=runtime.get("Cmd") or ["/bin/sh"],
                               working_dir=runtime.get("WorkingDir") or "/", labels=runtime.get("Labels") or {})
    derived = assemble_layout(work, layers, image_config, tag, int(time.time()))
    publish_layout(work, out_dir)
    return BuiltImage(out_dir, tag, derived.digest)
