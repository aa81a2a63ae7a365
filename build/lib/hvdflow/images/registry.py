"""Read-only client of a Docker/OCI registry (distribution API v2): resolve a tag to its manifest, fetch blobs.

Registries that ask for authentication (a bearer token, as Docker Hub and nvcr.io do, or basic credentials) are
answered by :mod:`hvdflow.images.registry_auth`, anonymously or with an image's credentials.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hvdflow.errors import RegistryError, RegistryUnreachable
from hvdflow.images.registry_auth import Credentials, open_authorized

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


@dataclass(frozen=True)
class Manifest:
    """An image manifest as the registry (or an archive) serves it, with the digest computed from its bytes."""

    registry_url: str
    """Where it came from: the registry's URL, or ``oci-archive:PATH`` for an image loaded from a file."""
    repository: str
    digest: str
    media_type: str
    config_digest: str
    layers: tuple[tuple[str, int], ...]
    document: dict[str, Any]
    raw: bytes
    """The manifest's bytes exactly as served: what the digest is of, and what an archive must keep."""

    @property
    def blobs(self) -> tuple[str, ...]:
        """Digests of every blob the image needs: the layers, then the config."""
        return tuple(digest for digest, _ in self.layers) + (self.config_digest,)


def _fetch(registry_url: str, repository: str, reference: str, timeout: float,
           credentials: Credentials | None) -> tuple[bytes, str]:
    url = f"{registry_url.rstrip('/')}/v2/{repository}/manifests/{reference}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES + INDEX_TYPES)}
    try:
        with open_authorized(url, headers, registry_url, credentials, timeout) as response:
            return response.read(), response.headers.get("Content-Type", "").split(";")[0].strip()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()
        if exc.code == 404:
            raise RegistryError(
                f"image {repository}:{reference} not found in registry {registry_url} (HTTP 404: {detail})"
            ) from None
        raise RegistryError(f"registry {registry_url} answered HTTP {exc.code} for {repository}:{reference}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RegistryUnreachable(
            f"registry {registry_url} is not reachable while resolving {repository}:{reference}: {reason}"
        ) from None


def resolve_manifest(registry_url: str, repository: str, reference: str, timeout: float = 30.0,
                     credentials: Credentials | None = None) -> Manifest:
    """Fetch the linux/amd64 manifest of ``repository:reference`` and check that it is what its digest says."""
    what = f"{registry_url}/{repository}:{reference}"
    body, media_type = _fetch(registry_url, repository, reference, timeout, credentials)
    expected = reference if reference.startswith("sha256:") else None
    if media_type in INDEX_TYPES:
        expected = linux_amd64(json.loads(body), what)
        body, media_type = _fetch(registry_url, repository, expected, timeout, credentials)
    return parse_manifest(body, media_type, registry_url, repository, what, expected)


def linux_amd64(index: dict[str, Any], what: str) -> str:
    """The digest of the linux/amd64 manifest an image index lists."""
    choices = [m for m in index.get("manifests", [])
               if m.get("platform", {}).get("os") == "linux" and m.get("platform", {}).get("architecture") == "amd64"]
    if not choices:
        raise RegistryError(f"{what} has no linux/amd64 image")
    return str(choices[0]["digest"])


def parse_manifest(body: bytes, media_type: str, source: str, repository: str, what: str,
                   expected_digest: str | None = None) -> Manifest:
    """The manifest in ``body`` (from ``source``), its digest computed from the bytes and checked against
    ``expected_digest`` when one is given; ``what`` names it in errors."""
    if media_type not in MANIFEST_TYPES:
        raise RegistryError(f"{what} has an unsupported manifest type {media_type!r}")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if expected_digest is not None and expected_digest != digest:
        raise RegistryError(f"{source} served {what} (digest {expected_digest}) with content of digest {digest}")
    try:
        manifest = json.loads(body)
        config_digest = str(manifest["config"]["digest"])
        layers = tuple((str(layer["digest"]), int(layer["size"])) for layer in manifest["layers"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(f"{what}: the manifest {digest} is not a valid image manifest ({exc!r})") from None
    return Manifest(registry_url=source, repository=repository, digest=digest, media_type=media_type,
                    config_digest=config_digest, layers=layers, document=manifest, raw=body)


def fetch_blob(registry_url: str, repository: str, digest: str, dest: Path, timeout: float = 60.0,
               credentials: Credentials | None = None) -> None:
    """Download blob ``digest`` of ``repository`` into ``dest``, checking its sha256 before it gets that name."""
    url = f"{registry_url.rstrip('/')}/v2/{repository}/blobs/{digest}"
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    sha = hashlib.sha256()
    try:
        with open_authorized(url, {}, registry_url, credentials, timeout) as response, open(tmp, "wb") as out:
            while True:
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                sha.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise RegistryUnreachable(f"registry {registry_url}: fetching blob {digest} of {repository} failed: {reason}") from None
    actual = "sha256:" + sha.hexdigest()
    if actual != digest:
        tmp.unlink(missing_ok=True)
        raise RegistryError(f"registry {registry_url} served blob {digest} of {repository} with content of digest "
                            f"{actual}; nothing was kept")
    os.replace(tmp, dest)
