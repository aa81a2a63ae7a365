"""The image lock file: the digest each catalogue image resolved to, so later pulls get exactly that image."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from hvdflow.errors import ConfigError, ImageError
from hvdflow.files.atomic import write_text_atomic
from hvdflow.files.yamlfile import check_keys, load_mapping

HEADER = (
    "# Written by `hvdflow image pull`: the manifest digest each image resolved to. Commit it to pin your images;\n"
    "# a pull that finds another digest fails until you run `hvdflow image update <name>`.\n"
)


@dataclass(frozen=True)
class LockEntry:
    """What one image was pinned to."""

    reference: str
    digest: str


def read_lock(path: Path) -> dict[str, LockEntry]:
    """The entries of the lock file at ``path`` (none if it does not exist)."""
    if not path.exists():
        return {}
    data = load_mapping(path)
    check_keys(str(path), data, ("images",))
    entries = {}
    for name, entry in (data["images"] or {}).items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: images.{name} must be a mapping")
        check_keys(f"{path}: images.{name}", entry, ("reference", "digest"))
        entries[str(name)] = LockEntry(str(entry["reference"]), str(entry["digest"]))
    return entries


def check_against_lock(path: Path, name: str, reference: str, digest: str, update: bool,
                       archive: Path | None = None) -> bool:
    """Compare a resolved digest (from the registry, or from ``archive``) with the lock; return whether the lock must
    be (re)written.

    Raises ImageError if the image is locked to another digest or reference and ``update`` is false.
    """
    entry = read_lock(path).get(name)
    if entry is None:
        return True
    if entry.reference == reference and entry.digest == digest:
        return False
    if update:
        return True
    if archive is not None:
        raise ImageError(
            f"image {name} ({reference}) in the archive {archive} is {digest}, but {path} pins {entry.reference} at "
            f"{entry.digest}; the archive holds another image. Run `hvdflow image update {name} --archive {archive}` "
            "to accept its digest."
        )
    raise ImageError(
        f"image {name} ({reference}) resolved to {digest}, but {path} pins {entry.reference} at {entry.digest}; "
        f"the image changed in the registry. Run `hvdflow image update {name}` to accept the new digest."
    )


def write_lock_entry(path: Path, name: str, reference: str, digest: str) -> None:
    """Record ``name`` at ``digest`` in the lock file, atomically."""
    entries = read_lock(path)
    entries[name] = LockEntry(reference, digest)
    body = {"images": {key: {"reference": e.reference, "digest": e.digest} for key, e in sorted(entries.items())}}
    write_text_atomic(path, HEADER + yaml.safe_dump(body, sort_keys=True))
