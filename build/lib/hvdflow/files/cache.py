"""Where hvdflow keeps heavy artefacts (wheels, built images, udocker tools) and how they are keyed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    """``$HVDFLOW_CACHE`` if set, else ``~/.cache/hvdflow``."""
    env = os.environ.get("HVDFLOW_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "hvdflow"


def content_key(*parts: str | bytes) -> str:
    """A sha256 hex digest over ``parts``, each length-prefixed so that no two part lists collide."""
    sha = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        sha.update(len(data).to_bytes(8, "big") + data)
    return sha.hexdigest()


def source_fingerprint(*paths: Path) -> str:
    """A key over the bytes of source files, so that a change in the code that builds an artefact rebuilds it."""
    return content_key(*(p.read_bytes() for p in sorted(paths)))


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 hex digest of a file's content."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            sha.update(block)
    return sha.hexdigest()
