"""The Python wheels of an image: a wheelhouse of PyPI's wheels and the Horovod wheel compiled once.

Both are made for the image's interpreter by its toolchain (:mod:`hvdflow.images.build.toolchain`: the host's, or
a build root of the image's Debian release) and cached under the hvdflow cache, keyed by their inputs: the
wheelhouse by the pinned requirements and the interpreter, the Horovod wheel by Horovod's and TensorFlow's versions,
the requirements its build venv holds, the interpreter, the compiler's and Open MPI's versions and the build
switches. Builds write into a temporary directory and are renamed into place when complete.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

from hvdflow.errors import ConfigError
from hvdflow.files.cache import cache_root, content_key, source_fingerprint
from hvdflow.images.build.commands import BuildError, run_step
from hvdflow.images.build.toolchain import HOST_PYTHON, Toolchain
from hvdflow.images.recipe import HorovodBuild, Recipe

PREFIX_MAP_TARGET = "/hvdflow-build"
"""What ``-ffile-prefix-map`` turns a compile's random build directory into, so that compiled files are reproducible."""


def _complete(directory: Path, pattern: str) -> list[Path]:
    return sorted(directory.glob(pattern)) if (directory / "COMPLETE").exists() else []


def _finish(tmp: Path, final: Path) -> None:
    (tmp / "COMPLETE").write_text("")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def ensure_wheelhouse(recipe: Recipe, toolchain: Toolchain, log: Path) -> Path:
    """A directory with a wheel for every pinned requirement of ``recipe``, for ``toolchain``'s interpreter,
    downloaded once from PyPI by the host's pip."""
    target = toolchain.pip_target()
    key = content_key(recipe.requirements.read_bytes(), *target)[:16]
    final = cache_root() / "wheelhouse" / key
    if (final / "COMPLETE").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}-"))
    try:
        if recipe.requirement_lines():  # a PyTorch image takes every Python package from Debian
            run_step([HOST_PYTHON, "-m", "pip", "download", "--only-binary=:all:", "--no-cache-dir", "--require-hashes",
                      *target, "-d", str(tmp), "-r", str(recipe.requirements)], log)
        _finish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def pip_install_argvs(pip: list[str], find_links: str, requirements: Optional[str], horovod_wheel: Optional[str]
                      ) -> list[list[str]]:
    """The pip commands that install a recipe's requirements (``--require-hashes``, nothing from an index; None: it
    pins none) and then the Horovod wheel built for it, if any (no hash to pin: it is our own build), in that order."""
    common = ["install", "--no-index", "--no-cache-dir", "--find-links", find_links]
    argvs = [] if requirements is None else [pip + common + ["--require-hashes", "-r", requirements]]
    if horovod_wheel is not None:
        argvs.append(pip + common + ["--no-deps", horovod_wheel])
    return argvs


def horovod_of(recipe: Recipe) -> HorovodBuild:
    """The recipe's Horovod build, or a ConfigError for a recipe without Horovod."""
    if recipe.horovod is None:
        raise ConfigError(f"{recipe.path} builds no Horovod (no horovod section)")
    return recipe.horovod


def horovod_wheel_key(recipe: Recipe, toolchain: Toolchain) -> str:
    """The cache key of the Horovod wheel ``recipe`` needs, compiled by ``toolchain``."""
    horovod = horovod_of(recipe)
    switches = dict(horovod.build_env)
    mpi = toolchain.package_version("libopenmpi-dev") if switches.get("HOROVOD_WITH_MPI") == "1" else "none"
    # the compiler the build names (CXX=g++-13), else Debian's default; a torch build by every Debian package it
    # names at its version: the torch it compiles against (libtorch-dev, or libtorch-cuda-dev), and for a CUDA build
    # the toolkit (nvcc) and NCCL
    compiler = switches.get("CXX", "g++")
    framework = (horovod.framework, horovod.framework_version)
    if horovod.framework == "torch":
        framework += tuple(f"{name} {toolchain.package_version(name)}" for name in sorted(horovod.build_apt_packages))
    return content_key("horovod", horovod.version, horovod.sdist_sha256, *framework, horovod.patches_fingerprint(),
                       "requirements", recipe.requirements.read_bytes(),  # the build venv: pip, setuptools, TF's headers
                       "python", toolchain.python_version, compiler, toolchain.package_version(compiler), "mpi", mpi,
                       repr(sorted(horovod.build_env)), str(recipe.source_date_epoch),
                       source_fingerprint(Path(__file__)))[:16]


def ensure_horovod_wheel(recipe: Recipe, wheelhouse: Path, toolchain: Toolchain, log: Path) -> Path:
    """The Horovod wheel for ``recipe``, compiled once by ``toolchain`` (debug info stripped) and cached.

    The requirements must include ``wheel``, whose command line repacks the stripped wheel. In a build root the
    wheelhouse and the sources are copied into it first, and only the finished wheel comes out.
    """
    horovod = horovod_of(recipe)
    key = horovod_wheel_key(recipe, toolchain)
    short = {"tensorflow": "tf", "torch": "torch"}[horovod.framework]
    final = cache_root() / "wheels" / f"horovod-{horovod.version}-{short}{horovod.framework_version}-{key}"
    found = _complete(final, "horovod-*.whl")
    if found:
        return found[0]
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = toolchain.work_dir(final.parent, f".{final.name}-")
    try:
        if toolchain.root is not None:
            shutil.copytree(wheelhouse, tmp / "wheelhouse")
            wheelhouse = tmp / "wheelhouse"
        shutil.copy2(recipe.requirements, tmp / "requirements.txt")
        venv = tmp / "venv"
        python = toolchain.path(venv / "bin" / "python")
        system_site = ["--system-site-packages"] if horovod.system_site_packages else []
        toolchain.run([HOST_PYTHON, "-m", "venv", *system_site, toolchain.path(venv)], log)
        pip = [python, "-m", "pip"]
        if recipe.requirement_lines():
            toolchain.run(pip + ["install", "--no-index", "--find-links", toolchain.path(wheelhouse), "--require-hashes",
                                 "-r", toolchain.path(tmp / "requirements.txt")], log)
        site = toolchain.output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        env = {"MAKEFLAGS": f"-j{os.cpu_count() or 1}", "SOURCE_DATE_EPOCH": str(recipe.source_date_epoch)}
        env.update({k: v.format(site_packages=site) for k, v in horovod.build_env})
        # Horovod's sources, checked against the recipe's sha256 (downloaded by the host's pip: a build root has no
        # network), unpacked here so that every path the compiler sees (sources, TensorFlow's headers in the venv)
        # is under tmp, which -ffile-prefix-map renames: no random directory name reaches the shared object, and the
        # same recipe gives the same wheel
        sdist = tmp / "horovod-sdist.txt"
        sdist.write_text(f"horovod=={horovod.version} --hash=sha256:{horovod.sdist_sha256}\n")
        run_step([HOST_PYTHON, "-m", "pip", "download", "--no-cache-dir", "--no-deps", "--no-binary=:all:",
                  "--require-hashes", "-r", str(sdist), "-d", str(tmp / "sdist")], log)
        (archive,) = sorted((tmp / "sdist").glob("horovod-*.tar.gz"))
        with tarfile.open(archive) as tar:  # checked by its sha256 above (Debian's Python 3.11.2 has no filter=)
            tar.extractall(tmp / "src")
        tree = tmp / "src" / f"horovod-{horovod.version}"
        for patch in horovod.patches:
            run_step(["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-d", str(tree), "-i", str(patch.resolve())], log)
        mapped = f"-ffile-prefix-map={toolchain.path(tmp)}={PREFIX_MAP_TARGET}"
        env.update(CFLAGS=mapped, CXXFLAGS=" ".join(filter(None, [env.get("CXXFLAGS", ""), mapped])))
        raw = tmp / "raw"
        toolchain.run(pip + ["wheel", "--no-cache-dir", "--no-build-isolation", "--no-deps", toolchain.path(tree),
                             "-w", toolchain.path(raw)], log, env=env)
        built = sorted(raw.glob("horovod-*.whl"))
        if len(built) != 1:
            raise BuildError(f"pip wheel produced {len(built)} Horovod wheels in {raw}, expected one (log: {log})")
        _strip_wheel(toolchain, venv, built[0], tmp, log, recipe.source_date_epoch)
        for part in (venv, raw, tmp / "src", tmp / "sdist", tmp / "wheelhouse"):
            shutil.rmtree(part, ignore_errors=True)
        for name in ("horovod-sdist.txt", "requirements.txt"):
            (tmp / name).unlink()
        _finish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(final.glob("horovod-*.whl"))[0]


def _strip_wheel(toolchain: Toolchain, venv: Path, wheel: Path, out_dir: Path, log: Path, epoch: int) -> None:
    """Repack ``wheel`` into ``out_dir`` with debug info stripped from its shared objects (57 MB to 2 MB); the
    archive's timestamps are ``epoch`` (wheel honours SOURCE_DATE_EPOCH)."""
    unpack = out_dir / "unpacked"
    wheel_cli = [toolchain.path(venv / "bin" / "python"), "-m", "wheel"]  # the venv's or Debian's python3-wheel
    toolchain.run([*wheel_cli, "unpack", "-d", toolchain.path(unpack), toolchain.path(wheel)], log)
    (tree,) = list(unpack.iterdir())
    objects = [toolchain.path(p) for p in tree.rglob("*.so")]
    if objects:
        toolchain.run(["strip", "--strip-debug", *objects], log)
    toolchain.run([*wheel_cli, "pack", "-d", toolchain.path(out_dir), toolchain.path(tree)], log,
                  env={"SOURCE_DATE_EPOCH": str(epoch)})
    shutil.rmtree(unpack)
