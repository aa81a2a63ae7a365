"""Image recipes (``containers/<image>/recipe.yaml``): what goes into an image we build ourselves."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import check_keys, expect, load_mapping

_PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[A-Za-z0-9_,\-]+\])?==([A-Za-z0-9_.+\-]+)$")
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class HorovodBuild:
    """How the Horovod wheel of an image is compiled."""

    version: str
    framework: str
    """``tensorflow`` (pinned in the requirements, from PyPI) or ``torch`` (Debian's python3-torch: PyPI's torch
    wheels all depend on NVIDIA's CUDA wheels)."""
    framework_version: str
    sdist_sha256: str
    """sha256 of Horovod's source distribution on PyPI: the build compiles exactly those sources."""
    build_apt_packages: tuple[str, ...]
    build_env: tuple[tuple[str, str], ...]
    patches: tuple[Path, ...] = ()
    """Our patches to Horovod's sources (``patch -p1``), applied in order after the sdist's sha256 is checked."""

    @property
    def tensorflow(self) -> Optional[str]:
        """The TensorFlow the wheel is built against, or None for a PyTorch build."""
        return self.framework_version if self.framework == "tensorflow" else None

    @property
    def system_site_packages(self) -> bool:
        """Whether the build venv sees the build root's Debian Python packages: the framework comes from Debian."""
        return self.framework == "torch"

    def patches_fingerprint(self) -> str:
        """sha256 over the patches' names and contents: what the wheel depends on besides the pinned sdist."""
        sha = hashlib.sha256()
        for patch in self.patches:
            sha.update(patch.name.encode() + b"\0" + patch.read_bytes() + b"\0")
        return sha.hexdigest()


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
    """A parsed recipe; ``path`` is the recipe file, ``requirements`` the pinned Python packages file.

    An image without Horovod (a base image, the small recipe of the build's determinism test) has no ``horovod``
    and no ``proot``."""

    path: Path
    suite: str
    variant: str
    source_date_epoch: int
    """The time the image claims to be built at: mtimes are clamped to it and mmdebstrap and pip build with it."""
    apt_packages: tuple[str, ...]
    debian_packages: Path
    """The Debian manifest: every package of the root filesystem and its version (``build/pins.py``)."""
    requirements: Path
    horovod: Optional[HorovodBuild]
    env: tuple[tuple[str, str], ...]
    python_layer: tuple[str, ...]
    proot: Optional[ProotBuild]
    python_bytecode: str = "keep"
    """``keep`` the ``.pyc`` files Debian and pip write, or ``drop`` them: Python before 3.11 marshals them with
    references that depend on reference counts, so they differ from build to build and the digest with them."""
    components: tuple[str, ...] = ("main",)
    """The Debian archive components apt takes packages from (``base.components``), for the image's root filesystem
    and the build root alike: ``main`` unless the recipe needs ``contrib`` (Debian's CUDA torch, NCCL) or
    ``non-free`` (NVIDIA's CUDA toolkit and libraries)."""
    debconf: tuple[str, ...] = ()
    """debconf answers (``base.debconf``, ``debconf-set-selections`` lines: ``package question type value``) given
    before apt installs the recipe's packages, in the image's root filesystem and the build root alike: a package
    whose default answer would download something outside Debian's archive is told not to."""

    def requirement_lines(self) -> list[str]:
        """The pinned requirements (``name==version``, their hashes dropped), comments and blank lines removed."""
        return [line.split()[0] for line in _logical_lines(self.requirements)]

    def fingerprint(self) -> str:
        """sha256 over the recipe, requirements, Debian manifest and proot files: the image cache key's input from
        the recipe."""
        sha = hashlib.sha256()
        for path in (self.path, self.requirements, self.debian_packages):
            data = path.read_bytes() if path.exists() else b"(absent)"
            sha.update(path.name.encode() + b"\0" + data + b"\0")
        if self.proot is not None:
            sha.update(self.proot.fingerprint().encode())
        return sha.hexdigest()


def _logical_lines(requirements: Path) -> list[str]:
    """The requirement lines of a pip requirements file, continuation lines joined, comments dropped."""
    text = requirements.read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _str_list(where: str, value: object) -> tuple[str, ...]:
    items = expect(where, value, list)
    return tuple(str(expect(f"{where}[{i}]", item, str)) for i, item in enumerate(items))


def _str_map(where: str, value: object) -> tuple[tuple[str, str], ...]:
    mapping = expect(where, value, dict)
    return tuple((str(k), str(expect(f"{where}.{k}", v, (str, int)))) for k, v in mapping.items())


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
BYTECODE_CHOICES = ("keep", "drop")
DEBIAN_COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
"""The components of Debian's archive a recipe may name in ``base.components``."""
DEFAULT_COMPONENTS = ("main",)
DEBCONF_TYPES = ("boolean", "select", "multiselect", "string", "password", "note", "text", "title")
_DEBCONF_LINE = re.compile(r"^(\S+)\s+(\S+/\S+)\s+(\S+)(?:\s+(.*))?$")


def _components(where: str, value: object) -> tuple[str, ...]:
    """``base.components``: Debian archive components, ``main`` among them, each named once."""
    components = _str_list(where, value)
    unknown = [name for name in components if name not in DEBIAN_COMPONENTS]
    if unknown:
        raise ConfigError(f"{where}: {', '.join(map(repr, unknown))} is not a component of Debian's archive "
                          f"({', '.join(DEBIAN_COMPONENTS)})")
    if "main" not in components:
        raise ConfigError(f"{where}: {list(components)} lacks main, which holds Debian's essential packages")
    if len(set(components)) != len(components):
        raise ConfigError(f"{where}: {list(components)} names a component twice")
    return components


def _debconf(where: str, value: object) -> tuple[str, ...]:
    """``base.debconf``: ``debconf-set-selections`` lines, ``package question type value``, one per item."""
    lines = _str_list(where, value)
    for i, line in enumerate(lines):
        match = _DEBCONF_LINE.match(line.strip())
        if not match or match.group(3) not in DEBCONF_TYPES:
            raise ConfigError(f"{where}[{i}]: {line!r} is not a debconf answer `package question type value` (question "
                              f"`package/name`, type one of {', '.join(DEBCONF_TYPES)})")
    return tuple(line.strip() for line in lines)


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


FRAMEWORKS = ("tensorflow", "torch")
"""What a Horovod wheel can be built against (one per image)."""


def _horovod(where: str, data: object, base: Path) -> HorovodBuild:
    hvd = expect(f"{where}: horovod", data, dict)
    check_keys(f"{where}: horovod", hvd, ("version", "sdist_sha256", "build_apt_packages", "build_env"),
               ("tensorflow", "torch", "patches"))
    frameworks = [name for name in FRAMEWORKS if name in hvd]
    if len(frameworks) != 1:
        raise ConfigError(f"{where}: horovod: name exactly one framework the wheel is built against, tensorflow: "
                          f"VERSION or torch: VERSION (found {', '.join(frameworks) or 'none'})")
    sdist = str(expect(f"{where}: horovod.sdist_sha256", hvd["sdist_sha256"], str))
    if not _SHA256.match(sdist):
        raise ConfigError(f"{where}: horovod.sdist_sha256: {sdist!r} is not a sha256 (64 lowercase hex digits)")
    patches = tuple(base / name for name in _str_list(f"{where}: horovod.patches", hvd.get("patches", [])))
    for patch in patches:
        if not patch.is_file():
            raise ConfigError(f"{where}: horovod.patches: {patch} does not exist")
    return HorovodBuild(
        version=str(hvd["version"]),
        framework=frameworks[0],
        framework_version=str(hvd[frameworks[0]]),
        sdist_sha256=sdist,
        build_apt_packages=_str_list(f"{where}: horovod.build_apt_packages", hvd["build_apt_packages"]),
        build_env=_str_map(f"{where}: horovod.build_env", hvd["build_env"]),
        patches=patches,
    )


def load_recipe(path: Path, check_hashes: bool = True) -> Recipe:
    """Read and validate the recipe at ``path``.

    The requirements must pin every package with ``==`` and its sha256 (``--hash``; not checked with ``check_hashes``
    false, for ``hvdflow image pin``); a recipe with Horovod must carry the proot and pin the TensorFlow it is built
    against."""
    data = load_mapping(path)
    where = str(path)
    check_keys(where, data, ("base", "source_date_epoch", "apt_packages", "debian_packages", "python_requirements",
                             "env", "layers"), ("horovod", "proot", "python_bytecode"))
    base = expect(f"{where}: base", data["base"], dict)
    check_keys(f"{where}: base", base, ("suite", "variant"), ("components", "debconf"))
    layers = expect(f"{where}: layers", data["layers"], dict)
    check_keys(f"{where}: layers", layers, ("python",))
    requirements = path.parent / str(expect(f"{where}: python_requirements", data["python_requirements"], str))
    if not requirements.is_file():
        raise ConfigError(f"{where}: python_requirements: {requirements} does not exist")
    epoch = expect(f"{where}: source_date_epoch", data["source_date_epoch"], int)
    if epoch <= 0:
        raise ConfigError(f"{where}: source_date_epoch: must be seconds since 1970 (a fixed date), got {epoch}")
    bytecode = str(data.get("python_bytecode", "keep"))
    if bytecode not in BYTECODE_CHOICES:
        raise ConfigError(f"{where}: python_bytecode: {bytecode!r} is not one of {', '.join(BYTECODE_CHOICES)}")
    if ("horovod" in data) != ("proot" in data):
        raise ConfigError(f"{where}: horovod and proot go together (a training image carries udocker's proot)")
    recipe = Recipe(
        path=path,
        suite=str(expect(f"{where}: base.suite", base["suite"], str)),
        variant=str(expect(f"{where}: base.variant", base["variant"], str)),
        source_date_epoch=epoch,
        apt_packages=_str_list(f"{where}: apt_packages", data["apt_packages"]),
        debian_packages=path.parent / str(expect(f"{where}: debian_packages", data["debian_packages"], str)),
        requirements=requirements,
        horovod=_horovod(where, data["horovod"], path.parent) if "horovod" in data else None,
        env=_str_map(f"{where}: env", data["env"]),
        python_layer=_str_list(f"{where}: layers.python", layers["python"]),
        proot=load_proot_build(path.parent / str(expect(f"{where}: proot", data["proot"], str))) if "proot" in data else None,
        python_bytecode=bytecode,
        components=_components(f"{where}: base.components", base.get("components", list(DEFAULT_COMPONENTS))),
        debconf=_debconf(f"{where}: base.debconf", base.get("debconf", [])),
    )
    _check_framework_pin(recipe, _requirement_pins(requirements, check_hashes), where)
    return recipe


def _requirement_pins(requirements: Path, check_hashes: bool) -> dict[str, str]:
    """``{name: version}`` of the requirements file; ConfigError for a requirement not pinned with ``==`` or (with
    ``check_hashes``) without its sha256."""
    pins = {}
    for line in _logical_lines(requirements):
        requirement, *options = line.split()
        match = _PIN.match(requirement)
        if not match:
            raise ConfigError(f"{requirements}: {requirement!r} is not pinned as name==version")
        if check_hashes and (not options or not all(_HASH.match(option) for option in options)):
            raise ConfigError(f"{requirements}: {requirement} needs its files' sha256 as --hash=sha256:<hex> (pip "
                              f"installs with --require-hashes); `hvdflow image pin NAME` writes them from PyPI")
        pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(3)  # PEP 503's name: tensorflow_cpu is tensorflow-cpu
    return pins


def _check_framework_pin(recipe: Recipe, pins: dict[str, str], where: str) -> None:
    """ConfigError where the framework Horovod is built against is not the one the requirements pin."""
    requirements = recipe.requirements
    if recipe.horovod is not None and recipe.horovod.framework == "torch":
        _check_debian_torch(recipe, recipe.horovod.framework_version)
    elif recipe.horovod is not None:
        tf_pin = pins.get("tensorflow-cpu") or pins.get("tensorflow")
        if tf_pin != recipe.horovod.tensorflow:
            raise ConfigError(
                f"{where}: horovod.tensorflow is {recipe.horovod.tensorflow} but {requirements} pins TensorFlow "
                f"{tf_pin}; the Horovod wheel only works with the TensorFlow it was built against"
            )


DEBIAN_TORCH_PACKAGES = ("python3-torch", "python3-torch-cuda")
"""Debian's torch: built for the CPU (main) or for CUDA (contrib; the two conflict, one per image)."""


def _check_debian_torch(recipe: Recipe, version: str) -> None:
    """The recipe's ``horovod.torch`` must be the upstream version of the Debian torch (python3-torch, or its CUDA
    build python3-torch-cuda) its Debian manifest pins (when there is a manifest: ``--debian pin`` writes the
    first)."""
    if not recipe.debian_packages.is_file():
        return
    for line in recipe.debian_packages.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] in DEBIAN_TORCH_PACKAGES:
            upstream = fields[1].split(":")[-1].split("+")[0].split("-")[0]
            if upstream != version:
                raise ConfigError(f"{recipe.path}: horovod.torch is {version} but {recipe.debian_packages} pins "
                                  f"{fields[0]} {fields[1]}; the Horovod wheel only works with the torch it was built "
                                  "against")
            return
    raise ConfigError(f"{recipe.path}: horovod.torch is {version} but {recipe.debian_packages} has no "
                      f"{' or '.join(DEBIAN_TORCH_PACKAGES)}: add one to apt_packages")
