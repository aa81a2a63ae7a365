"""udocker's engine tarball, made from Debian's binaries so that udocker never downloads its own.

udocker installs its engines from a "udockertools" tarball (``udocker_dir/bin``, ``udocker_dir/lib/VERSION``) that it
normally fetches from the internet. This package builds that tarball locally: ``bin/proot`` is a wrapper around the
host's ``/usr/bin/proot`` (Debian's package), which runs udocker's P1 and P2 modes.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from hvdflow.errors import UdockerError
from hvdflow.files.cache import content_key

TOOLS_RELEASE = "1.2.11"  # the minimum tarball release udocker 1.3.17 accepts (its conf['tarball_release'])
_HERE = Path(__file__).parent
HOST_PROOT = Path("/usr/bin/proot")


def tools_tarball_key() -> str:
    """Key of the tarball: the wrapper's bytes and the release it claims."""
    return content_key((_HERE / "proot").read_bytes(), TOOLS_RELEASE)[:16]


def build_tools_tarball(dest_dir: Path) -> Path:
    """Write ``udocker-tools-<key>.tar.gz`` into ``dest_dir`` (once) and return its path."""
    if not HOST_PROOT.exists():
        raise UdockerError(f"{HOST_PROOT} is missing: install Debian's proot package (udocker's P1/P2 engine)")
    target = dest_dir / f"udocker-tools-{tools_tarball_key()}.tar.gz"
    if target.exists():
        return target
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    with tarfile.open(tmp, "w:gz") as tar:
        for name, data, mode in (
            ("udocker_dir/bin/proot", (_HERE / "proot").read_bytes(), 0o755),
            ("udocker_dir/lib/VERSION", f"{TOOLS_RELEASE}\n".encode(), 0o644),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, target)
    return target
