"""Image recipes (``containers/<image>/recipe.yaml``): what goes into an image we build ourselves."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import check_keys, expect, load_mapping

_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[A-Za-z0-9_,\-]+\])?==([A-Za-z0-9_.+\-]+)$")


@dataclass(frozen=True)
class HorovodBuild:
    """How the Horovod wheel of an image is compiled."""

    version: str
    tensorflow: str
    build_apt_packages: tuple[str, ...]
    build_env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ProotBuild:
    """How the proot an image carries is built (``containers/proot/proot.yaml``): pinned sources, patches."""

    path: Path
    version: str
    sources: tuple[tuple[str, str], ...]
    drop_debian_patches: tuple[str, ...]
    patches: tuple[Path, ...]
    build_apt_packages: tuple[str, ...]

    def fingerprint(self) -> str:
        """sha256 over the spec and our patches: what the built binary depends on besides the pinned sources."""
        sha = hashlib.sha256()
        for path in (self.path, *self.patches):
            sha.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return sha.hexdigest()


@dataclass(frozen=True)
class Recipe:
    """A parsed recipe; ``path`` is the recipe file, ``requirements`` the pinned Python packages file."""

    path: Path
    suite: str
    variant: str
    apt_packages: tuple[str, ...]
    requirements: Path
    horovod: HorovodBuild
    env: tuple[tuple[str, str], ...]
    python_layer: tuple[str, ...]
    proot: ProotBuild

    def requirement_lines(self) -> list[str]:
        """The pinned requirements, comments and blank lines removed."""
        return [line.strip() for line in self.requirements.read_text().splitlines() if line.strip() and not line.startswith("#")]

    def fingerprint(self) -> str:
        """sha256 over the recipe, requirements and proot files: the image cache key's input from the recipe."""
        sha = hashlib.sha256()
        for path in (self.path, self.requirements):
            sha.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        sha.update(self.proot.fingerprint().encode())
        return sha.hexdigest()


def _str_list(where: str, value: object) -> tuple[str, ...]:
    items = expect(where, value, list)
    return tuple(str(expect(f"{where}[{i}]", item, str)) for i, item in enumerate(items))


def _str_map(where: str, value: object) -> tuple[tuple[str, str], ...]:
    mapping = expect(where, value, dict)
    return tuple((str(k), str(expect(f"{where}.{k}", v, (str, int)))) for k, v in mapping.items())


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def load_proot_build(path: Path) -> ProotBuild:
    """Read and validate the proot build spec at ``path``; every source pinned by sha256, every patch present."""
    data = load_mapping(path)
    where = str(path)
    check_keys(where, data, ("version", "sources", "drop_debian_patches", "patches", "build_apt_packages"))
    sources = []
    for i, item in enumerate(expect(f"{where}: sources", data["sources"], list)):
        entry = expect(f"{where}: sources[{i}]", item, dict)
        check_keys(f"{where}: sources[{i}]", entry, ("url", "sha256"))
        url = str(expect(f"{where}: sources[{i}].url", entry["url"], str))
        sha = str(expect(f"{where}: sources[{i}].sha256", entry["sha256"], str))
        if not _SHA256.match(sha):
            raise ConfigError(f"{where}: sources[{i}].sha256: {sha!r} is not a sha256 (64 lowercase hex digits)")
        sources.append((url, sha))
    patches = tuple(path.parent / name for name in _str_list(f"{where}: patches", data["patches"]))
    for patch in patches:
        if not patch.is_file():
            raise ConfigError(f"{where}: patches: {patch} does not exist")
    return ProotBuild(
        path=path,
        version=str(expect(f"{where}: version", data["version"], str)),
        sources=tuple(sources),
        drop_debian_patches=_str_list(f"{where}: drop_debian_patches", data["drop_debian_patches"]),
        patches=patches,
        build_apt_packages=_str_list(f"{where}: build_apt_packages", data["build_apt_packages"]),
    )


def load_recipe(path: Path) -> Recipe:
    """Read and validate the recipe at ``path``; the requirements must pin every package with ``==``."""
    data = load_mapping(path)
    where = str(path)
    check_keys(where, data, ("base", "apt_packages", "python_requirements", "horovod", "env", "layers", "proot"))
    base = expect(f"{where}: base", data["base"], dict)
    check_keys(f"{where}: base", base, ("suite", "variant"))
    hvd = expect(f"{where}: horovod", data["horovod"], dict)
    check_keys(f"{where}: horovod", hvd, ("version", "tensorflow", "build_apt_packages", "build_env"))
    layers = expect(f"{where}: layers", data["layers"], dict)
    check_keys(f"{where}: layers", layers, ("python",))
    requirements = path.parent / str(expect(f"{where}: python_requirements", data["python_requirements"], str))
    if not requirements.is_file():
        raise ConfigError(f"{where}: python_requirements: {requirements} does not exist")
    recipe = Recipe(
        path=path,
        suite=str(expect(f"{where}: base.suite", base["suite"], str)),
        variant=str(expect(f"{where}: base.variant", base["variant"], str)),
        apt_packages=_str_list(f"{where}: apt_packages", data["apt_packages"]),
        requirements=requirements,
        horovod=HorovodBuild(
            version=str(hvd["version"]),
            tensorflow=str(hvd["tensorflow"]),
            build_apt_packages=_str_list(f"{where}: horovod.build_apt_packages", hvd["build_apt_packages"]),
            build_env=_str_map(f"{where}: horovod.build_env", hvd["build_env"]),
        ),
        env=_str_map(f"{where}: env", data["env"]),
        python_layer=_str_list(f"{where}: layers.python", layers["python"]),
        proot=load_proot_build(path.parent / str(expect(f"{where}: proot", data["proot"], str))),
    )
    pins = {}
    for line in recipe.requirement_lines():
        match = _PIN.match(line)
        if not match:
            raise ConfigError(f"{requirements}: {line!r} is not pinned as name==version")
        pins[match.group(1).lower()] = match.group(3)
    tf_pin = pins.get("tensorflow-cpu") or pins.get("tensorflow")
    if tf_pin != recipe.horovod.tensorflow:
        raise ConfigError(
            f"{where}: horovod.tensorflow is {recipe.horovod.tensorflow} but {requirements} pins TensorFlow {tf_pin}; "
            "the Horovod wheel only works with the TensorFlow it was built against"
        )
    return recipe
