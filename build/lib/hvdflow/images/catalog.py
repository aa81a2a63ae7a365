"""The image catalogue (``containers/catalog.yaml``): which images hvdflow knows and what each contains."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import check_keys, expect, load_mapping
from hvdflow.images.modes import EXECMODES
from hvdflow.images.registry_auth import Credentials

PROOT_ENGINES = ("image", "host")
"""The proot that runs P1/P2: the one hvdflow's images carry (seccomp-accelerated), or the host's /usr/bin/proot."""
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class ImageSpec:
    """One catalogue entry."""

    name: str
    description: str
    repository: str
    tag: str
    device: str
    python: str
    tensorflow: str
    """The TensorFlow version, or ``none``."""
    horovod: str
    mpi: str
    execmode: str
    recipe: Optional[Path]
    tested: bool
    purposes: tuple[str, ...]
    registry: Optional[str] = None
    """The image's own registry (Docker Hub, nvcr.io, a site's), used instead of the profile's; None: the profile's."""
    torch: str = "none"
    """The PyTorch version, or ``none`` (the optional field ``torch``)."""
    username: Optional[str] = None
    password_env: Optional[str] = None
    """The environment variable that holds the password (or API key) of ``username`` at the registry."""

    @property
    def reference(self) -> str:
        """``repository:tag``, the form udocker and skopeo take."""
        return f"{self.repository}:{self.tag}"

    def registry_url(self, profile_registry: str) -> str:
        """Where the image is pulled from: its own registry if it names one, else the profile's."""
        return self.registry or profile_registry

    def credentials(self) -> Optional[Credentials]:
        """The registry credentials of the entry (its password read from the environment now); None: anonymous.

        ConfigError naming the entry and the variable if the variable is not set.
        """
        if self.username is None or self.password_env is None:
            return None
        password = os.environ.get(self.password_env)
        if not password:
            raise ConfigError(f"images.{self.name}.password_env: the environment variable {self.password_env} (the "
                              f"password of user {self.username} at {self.registry or 'the registry'}) is not set")
        return Credentials(self.username, password)


_FIELDS = ("description", "repository", "tag", "device", "python", "tensorflow", "horovod", "mpi", "execmode", "tested")
_ACCESS = ("registry", "username", "password_env")
"""Optional fields: where an image that is not served by the profile's registry comes from, and as whom."""
_REGISTRY = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]+)?/?$")
PURPOSES = ("prepare", "train")  # dataset preparation (TIFF/PNG/parquet readers), Horovod training and evaluation


def _parse_image(name: str, entry: object, base: Path, where: str) -> ImageSpec:
    where = f"{where}: images.{name}"
    expect(where, entry, dict)
    assert isinstance(entry, dict)
    check_keys(where, entry, (*_FIELDS, "purposes"), ("recipe", "torch", *_ACCESS))
    values = {key: entry[key] for key in _FIELDS}
    purposes = tuple(str(p) for p in expect(f"{where}.purposes", entry["purposes"], list))
    if not purposes or not set(purposes) <= set(PURPOSES):
        raise ConfigError(f"{where}.purposes: {list(purposes)} must be a non-empty list of {', '.join(PURPOSES)}")
    for key in _FIELDS:
        if key != "tested":
            values[key] = str(expect(f"{where}.{key}", values[key], (str, int, float)))
    expect(f"{where}.tested", values["tested"], bool)
    if not _REPOSITORY.match(values["repository"]):
        raise ConfigError(f"{where}.repository: {values['repository']!r} is not a valid repository name")
    if not _TAG.match(values["tag"]):
        raise ConfigError(f"{where}.tag: {values['tag']!r} is not a valid tag")
    if values["device"] not in ("cpu", "gpu"):
        raise ConfigError(f"{where}.device: {values['device']!r} must be cpu or gpu")
    if values["execmode"] not in EXECMODES:
        raise ConfigError(f"{where}.execmode: {values['execmode']!r} must be one of {', '.join(EXECMODES)}")
    recipe = None
    if "recipe" in entry:
        recipe = base / str(expect(f"{where}.recipe", entry["recipe"], str))
        if not recipe.is_file():
            raise ConfigError(f"{where}.recipe: {recipe} does not exist")
    access = {key: str(expect(f"{where}.{key}", entry[key], str)) for key in _ACCESS if key in entry}
    if "registry" in access and not _REGISTRY.match(access["registry"]):
        raise ConfigError(f"{where}.registry: {access['registry']!r} must be http://HOST[:PORT] or https://HOST[:PORT]")
    if ("username" in access) != ("password_env" in access):
        raise ConfigError(f"{where}: username and password_env go together (the user, and the environment variable "
                          "that holds its password)")
    torch = str(expect(f"{where}.torch", entry.get("torch", "none"), (str, int, float)))
    return ImageSpec(name=name, recipe=recipe, purposes=purposes, torch=torch, **values, **access)


def load_catalog(path: Path) -> dict[str, ImageSpec]:
    """Read and validate the catalogue at ``path``."""
    data = load_mapping(path)
    check_keys(str(path), data, ("images",))
    images = expect(f"{path}: images", data["images"], dict)
    if not images:
        raise ConfigError(f"{path}: images is empty")
    return {str(name): _parse_image(str(name), entry, path.parent, str(path)) for name, entry in images.items()}


def get_image(catalog: dict[str, ImageSpec], name: str, path: Path) -> ImageSpec:
    """The entry ``name`` of ``catalog``, or a ConfigError listing the names it has."""
    try:
        return catalog[name]
    except KeyError:
        raise ConfigError(f"image {name!r} is not in the catalogue {path}; known images: {', '.join(sorted(catalog))}") from None
