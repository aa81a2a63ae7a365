"""udocker's engine tarball, made locally so that udocker never downloads its own, and the proot it runs.

udocker installs its engines from a "udockertools" tarball (``udocker_dir/bin``, ``udocker_dir/lib/VERSION``) that it
normally fetches from the internet. This package builds that tarball locally, with a wrapper around the host's
``/usr/bin/proot`` as ``bin/proot``. The proot that runs udocker's P1 and P2 modes is the one the profile picks: the
seccomp-accelerated one hvdflow's images carry at :data:`IMAGE_PROOT` (``proot: image``, the default), or the
host's (``proot: host``, Debian's package); :func:`engine_wrapper` writes the wrapper for it, which udocker is
pointed at. The binary's path is written into the wrapper: udocker clears the environment before it runs proot.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
from pathlib import Path

from hvdflow.errors import UdockerError
from hvdflow.files.cache import content_key

TOOLS_RELEASE = "1.2.11"  # the minimum tarball release udocker 1.3.17 accepts (its conf['tarball_release'])
_HERE = Path(__file__).parent
HOST_PROOT = Path("/usr/bin/proot")
IMAGE_PROOT = "opt/hvdflow/bin/proot"
"""Where hvdflow's images carry their proot, relative to the image's root."""


def engine_binary(udocker_dir: Path, container: str, choice: str) -> Path:
    """The proot that runs ``container`` for the profile's ``proot`` choice; UdockerError if it is not there."""
    if choice == "host":
        if not HOST_PROOT.exists():
            raise UdockerError(f"{HOST_PROOT} is missing (profile proot: host): install Debian's proot package, or "
                               "set proot: image to run the proot the image carries")
        return HOST_PROOT
    carried = udocker_dir / "containers" / container / "ROOT" / IMAGE_PROOT
    if not carried.is_file():
        raise UdockerError(f"the image of container {container} carries no proot at /{IMAGE_PROOT} (profile proot: "
                           "image; an image hvdflow did not build): set proot: host in the profile's hvdflow.yaml to "
                           f"run {HOST_PROOT}")
    return carried


_WRAPPER_DEFAULT = "PROOT=${HVDFLOW_PROOT:-/usr/bin/proot}\n"


def engine_wrapper(state_dir: Path, proot: Path) -> Path:
    """The wrapper (``-k`` dropped) that runs ``proot``, written once into ``state_dir``; udocker runs it for P1/P2."""
    text = (_HERE / "proot").read_text()
    if _WRAPPER_DEFAULT not in text:
        raise UdockerError(f"{_HERE / 'proot'} no longer names its proot as {_WRAPPER_DEFAULT.strip()!r}")
    text = text.replace(_WRAPPER_DEFAULT, f"PROOT={shlex.quote(str(proot))}\n")
    wrapper = state_dir / f"proot-{content_key(text)[:16]}"
    if not wrapper.exists():  # executable before it is in place: ranks that start together may run it at once
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = wrapper.with_name(f".{wrapper.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, wrapper)
    return wrapper


def tools_tarball_key() -> str:
    """Key of the tarball: the wrapper's bytes and the release it claims."""
    return content_key((_HERE / "proot").read_bytes(), TOOLS_RELEASE)[:16]


def build_tools_tarball(dest_dir: Path) -> Path:
    """Write ``udocker-tools-<key>.tar.gz`` into ``dest_dir`` (once) and return its path."""
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
