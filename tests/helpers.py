"""Small real images for the tests: Debian's static busybox in one layer, written with hvdflow's OCI code."""

from __future__ import annotations

import io
import tarfile
import tempfile
import time
from pathlib import Path

from hvdflow.images.build.image import BuiltImage
from hvdflow.images.build.oci import ImageConfig, assemble_layout, publish_layout, write_layer_bytes

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
