"""Read-only client of a Docker/OCI registry (distribution API v2): resolve a tag to its manifest digest."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from hvdflow.errors import RegistryError

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
    """An image manifest as the registry serves it, with the digest computed from its bytes."""

    registry_url: str
    repository: str
    digest: str
    media_type: str
    config_digest: str
    layers: tuple[tuple[str, int], ...]
    document: dict[str, Any]

    @property
    def blobs(self) -> tuple[str, ...]:
        """Digests of every blob the image needs: the layers, then the config."""
        return tuple(digest for digest, _ in self.layers) + (self.config_digest,)


def _fetch(registry_url: str, repository: str, reference: str, timeout: float) -> tuple[bytes, str]:
    url = f"{registry_url.rstrip('/')}/v2/{repository}/manifests/{reference}"
    request = urllib.request.Request(url, headers={"Accept": ", ".join(MANIFEST_TYPES + INDEX_TYPES)})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
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
        raise RegistryError(
            f"registry {registry_url} is not reachable while resolving {repository}:{reference}: {reason}"
        ) from None


def resolve_manifest(registry_url: str, repository: str, reference: str, timeout: float = 30.0) -> Manifest:
    """Fetch the linux/amd64 manifest of ``repository:reference`` and check that it is what its digest says."""
    body, media_type = _fetch(registry_url, repository, reference, timeout)
    if media_type in INDEX_TYPES:
        index = json.loads(body)
        choices = [m for m in index.get("manifests", [])
                   if m.get("platform", {}).get("os") == "linux" and m.get("platform", {}).get("architecture") == "amd64"]
        if not choices:
            raise RegistryError(f"{registry_url}/{repository}:{reference} has no linux/amd64 image")
        body, media_type = _fetch(registry_url, repository, choices[0]["digest"], timeout)
    if media_type not in MANIFEST_TYPES:
        raise RegistryError(f"{registry_url}/{repository}:{reference} has an unsupported manifest type {media_type!r}")
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if reference.startswith("sha256:") and reference != digest:
        raise RegistryError(f"registry {registry_url} served {repository}@{reference} with content of digest {digest}")
    manifest = json.loads(body)
    return Manifest(
        registry_url=registry_url,
        repository=repository,
        digest=digest,
        media_type=media_type,
        config_digest=manifest["config"]["digest"],
        layers=tuple((layer["digest"], int(layer["size"])) for layer in manifest["layers"]),
        document=manifest,
    )
