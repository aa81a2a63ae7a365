"""Build an image of the catalogue from its recipe into a cached OCI layout, and push it to a registry."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.errors import ConfigError, RegistryError
from hvdflow.files.cache import cache_root, content_key, sha256_file, source_fingerprint
from hvdflow.files.filelock import exclusive_lock
from hvdflow.files.heartbeat import last_line
from hvdflow.images.build.commands import run_step
from hvdflow.images.build.oci import ImageConfig, LayerSpec, prefix_filter, write_oci_layout
from hvdflow.images.build.pins import read_debian_manifest
from hvdflow.images.build.proot import ensure_proot, proot_key
from hvdflow.images.build.rootfs import build_rootfs
from hvdflow.images.build.toolchain import Toolchain, made_toolchain, toolchain_for
from hvdflow.images.build.wheels import ensure_horovod_wheel, ensure_wheelhouse, horovod_wheel_key
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.recipe import load_recipe
from hvdflow.images.udocker_tools import IMAGE_PROOT

_BUILDER_SOURCES = [Path(__file__).parent / name
                    for name in ("image.py", "oci.py", "proot.py", "rootfs.py", "rootless.py", "toolchain.py", "wheels.py")]


@dataclass(frozen=True)
class BuiltImage:
    """An OCI image layout on disk and the digest of its manifest."""

    layout: Path
    tag: str
    manifest_digest: str

    @property
    def source(self) -> str:
        """The ``oci:DIR:TAG`` reference skopeo copies from."""
        return f"oci:{self.layout}:{self.tag}"


@dataclass
class BuildProgress:
    """What a build is doing, for its progress lines: the phase, and while the root filesystem is made, how many of
    the Debian manifest's packages dpkg has installed in it."""

    phase: str = "starting"
    rootfs: Optional[Path] = None
    packages: int = 0
    """How many Debian packages the recipe's manifest pins (0: unknown)."""

    def enter(self, phase: str, log: Path) -> None:
        """Start ``phase``, saying so in the build's log."""
        self.phase = phase
        with open(log, "a") as out:
            out.write(f"hvdflow: {phase}\n")

    def text(self, log: Path) -> str:
        """The phase, the packages installed so far (while there is a root filesystem) and the log's last line."""
        said = [self.phase]
        info = None if self.rootfs is None else self.rootfs / "var" / "lib" / "dpkg" / "info"
        if info is not None and info.is_dir():
            installed = sum(1 for name in os.listdir(info) if name.endswith(".list"))
            said.append(f"{installed}{f' of {self.packages}' if self.packages else ''} Debian packages installed")
        last = last_line(log)
        return "; ".join(said + ([last[:160]] if last and not last.startswith("hvdflow: ") else []))


def image_cache_dir(spec: ImageSpec, toolchain: Toolchain) -> Path:
    """Where the OCI layout of ``spec``, built by ``toolchain``, is cached; the name holds a key over everything the
    build reads."""
    if spec.recipe is None:
        raise ConfigError(f"image {spec.name} has no recipe in the catalogue; it can only be pulled")
    recipe = load_recipe(spec.recipe)
    key = content_key(recipe.fingerprint(), toolchain.python_version, toolchain.glibc,
                      horovod_wheel_key(recipe, toolchain) if recipe.horovod else "no horovod",
                      proot_key(recipe.proot) if recipe.proot else "no proot",
                      source_fingerprint(*_BUILDER_SOURCES), spec.reference)[:16]
    return cache_root() / "images" / f"{spec.name}-{key}"


def _read_manifest_digest(layout: Path) -> str:
    import json

    index = json.loads((layout / "index.json").read_text())
    return str(index["manifests"][0]["digest"])


BUILD_LOCK_TIMEOUT = 3 * 3600.0
"""Seconds a build waits for another one of the same cache (a cold build of hvdflow-cpu takes about 6 minutes)."""


def build_image(spec: ImageSpec, log: Path, debian: str = "check", progress: Optional[BuildProgress] = None
                ) -> BuiltImage:
    """The OCI layout of ``spec``, built from its recipe unless the cache already holds it.

    The build is reproducible: the same recipe gives the same digest on another day or machine of the same kind
    (``rootfs`` for the Debian and Python parts, ``oci`` for the layers). ``debian`` says what to do where Debian's
    mirror no longer serves a pinned version (``pins.DEBIAN_MODES``; ``pin`` always rebuilds). One build at a time
    per cache: a second waits (its build roots, wheels and proot are shared), then finds the image if it was the same.
    ``progress`` is kept up to date with the build's phase.
    """
    if spec.recipe is None:
        raise ConfigError(f"image {spec.name} has no recipe in the catalogue; it can only be pulled")
    if debian != "pin":  # an image in the cache is found without waiting for another image's build
        toolchain = made_toolchain(load_recipe(spec.recipe))
        cached = image_cache_dir(spec, toolchain) if toolchain is not None else None
        if cached is not None and (cached / "index.json").is_file():  # renamed into place whole (write_oci_layout)
            return BuiltImage(cached, spec.tag, _read_manifest_digest(cached))
    lock = cache_root() / "build.lock"  # beside images/, which holds only images
    with exclusive_lock(lock, BUILD_LOCK_TIMEOUT, f"building {spec.name}"):
        return _build(spec, spec.recipe, log, debian, progress or BuildProgress())


def _build(spec: ImageSpec, recipe_path: Path, log: Path, debian: str, progress: BuildProgress) -> BuiltImage:
    recipe = load_recipe(recipe_path)
    progress.enter(f"the toolchain of Debian {recipe.suite}", log)
    toolchain = toolchain_for(recipe, log)
    if debian != "pin":
        cached = image_cache_dir(spec, toolchain)
        if (cached / "index.json").is_file():
            return BuiltImage(cached, spec.tag, _read_manifest_digest(cached))
    progress.enter("the wheelhouse: the pinned Python packages (downloaded once)", log)
    wheelhouse = ensure_wheelhouse(recipe, toolchain, log)
    if recipe.horovod:
        progress.enter(f"Horovod {recipe.horovod.version}: its wheel (compiled once, about 5 minutes)", log)
    wheel = ensure_horovod_wheel(recipe, wheelhouse, toolchain, log) if recipe.horovod else None
    if recipe.proot:
        progress.enter(f"proot {recipe.proot.version} (compiled once)", log)
    proot = ensure_proot(recipe.proot, log) if recipe.proot else None
    building = cache_root() / "images"
    building.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=building, prefix=".rootfs-"))
    try:
        rootfs = work / "rootfs"
        progress.rootfs = rootfs
        progress.packages = len(read_debian_manifest(recipe.debian_packages)) if recipe.debian_packages.is_file() else 0
        progress.enter("the root filesystem: Debian's packages (mmdebstrap), then the wheels (pip)", log)
        build_rootfs(recipe, wheelhouse, wheel, rootfs, log, debian)
        progress.rootfs = None
        labels = {
            "org.opencontainers.image.title": spec.name,
            "org.opencontainers.image.description": spec.description,
            "io.hvdflow.python": toolchain.python_version,
            "io.hvdflow.recipe.sha256": load_recipe(recipe_path).fingerprint(),  # after --debian pin: the new manifest
        }
        if recipe.horovod is not None and wheel is not None:
            labels.update({f"io.hvdflow.{recipe.horovod.framework}": recipe.horovod.framework_version,
                           "io.hvdflow.horovod": recipe.horovod.version,
                           "io.hvdflow.horovod-wheel.sha256": sha256_file(wheel)})
        if recipe.proot is not None and proot is not None:
            carried = rootfs / IMAGE_PROOT
            carried.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(proot, carried)
            labels["io.hvdflow.proot"] = f"/{IMAGE_PROOT} {recipe.proot.version} seccomp, sha256 {sha256_file(proot)}"
        config = ImageConfig(
            env=["PATH=/usr/local/bin:/usr/bin:/bin"] + [f"{k}={v}" for k, v in recipe.env],
            cmd=["python3"],
            labels=labels,
        )
        python_part = prefix_filter(list(recipe.python_layer))
        layers = [LayerSpec("system", prefix_filter(list(recipe.python_layer), invert=True)), LayerSpec("python", python_part)]
        layout = image_cache_dir(spec, toolchain)
        progress.enter("the layers: the OCI layout, gzip", log)
        manifest = write_oci_layout(rootfs, layers, config, layout, spec.tag, recipe.source_date_epoch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return BuiltImage(layout, spec.tag, manifest.digest)


def push_image(image: BuiltImage, registry_url: str, repository: str, tag: str, log: Path) -> None:
    """Copy ``image`` into ``registry_url`` as ``repository:tag`` with skopeo (plain http allowed)."""
    host = registry_url.split("://", 1)[-1].rstrip("/")
    tls = "false" if registry_url.startswith("http://") else "true"
    try:
        run_step(["skopeo", "copy", "--insecure-policy", f"--dest-tls-verify={tls}", image.source,
                  f"docker://{host}/{repository}:{tag}"], log)
    except Exception as exc:
        raise RegistryError(f"pushing {image.layout} to {registry_url}/{repository}:{tag} failed: {exc}") from exc
