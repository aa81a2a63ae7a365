"""The Python wheels of an image: a wheelhouse of PyPI's wheels and the Horovod wheel compiled once.

Both are cached under the hvdflow cache, keyed by their inputs: the wheelhouse by the pinned requirements and
the interpreter, the Horovod wheel by Horovod's and TensorFlow's versions, the interpreter, Open MPI's version and
the build switches. Builds write into a temporary directory and are renamed into place when complete.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

from hvdflow.errors import ConfigError
from hvdflow.files.cache import cache_root, content_key, source_fingerprint
from hvdflow.images.build.commands import BuildError, run_step
from hvdflow.images.recipe import HorovodBuild, Recipe

BUILD_PYTHON = "/usr/bin/python3"
PREFIX_MAP_TARGET = "/hvdflow-build"
"""What ``-ffile-prefix-map`` turns a compile's random build directory into, so that compiled files are reproducible."""


def python_version(python: str = BUILD_PYTHON) -> str:
    """The full version (``3.11.2``) of the interpreter the image's wheels are built with."""
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"], check=True,
                          capture_output=True, text=True).stdout.strip()


def debian_package_version(package: str) -> str:
    """The installed version of a Debian package, or a BuildError saying it is missing."""
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout:
        raise BuildError(f"Debian package {package} is not installed; building the image needs it (the recipe's "
                         "build_apt_packages)")
    return proc.stdout.strip()


def _complete(directory: Path, pattern: str) -> list[Path]:
    return sorted(directory.glob(pattern)) if (directory / "COMPLETE").exists() else []


def _finish(tmp: Path, final: Path) -> None:
    (tmp / "COMPLETE").write_text("")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


def ensure_wheelhouse(recipe: Recipe, log: Path) -> Path:
    """A directory with a wheel for every pinned requirement of ``recipe``, downloaded once from PyPI."""
    key = content_key(recipe.requirements.read_bytes(), python_version())[:16]
    final = cache_root() / "wheelhouse" / key
    if _complete(final, "*.whl"):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{key}-"))
    try:
        run_step([BUILD_PYTHON, "-m", "pip", "download", "--only-binary=:all:", "--no-cache-dir", "--require-hashes",
                  "-d", str(tmp), "-r", str(recipe.requirements)], log)
        _finish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def pip_install_argvs(pip: list[str], find_links: str, requirements: str, horovod_wheel: Optional[str]) -> list[list[str]]:
    """The pip commands that install a recipe's requirements (``--require-hashes``, nothing from an index) and then
    the Horovod wheel built for it, if any (no hash to pin: it is our own build), in that order."""
    common = ["install", "--no-index", "--no-cache-dir", "--find-links", find_links]
    argvs = [pip + common + ["--require-hashes", "-r", requirements]]
    if horovod_wheel is not None:
        argvs.append(pip + common + ["--no-deps", horovod_wheel])
    return argvs


def horovod_of(recipe: Recipe) -> HorovodBuild:
    """The recipe's Horovod build, or a ConfigError for a recipe without Horovod."""
    if recipe.horovod is None:
        raise ConfigError(f"{recipe.path} builds no Horovod (no horovod section)")
    return recipe.horovod


def horovod_wheel_key(recipe: Recipe) -> str:
    """The cache key of the Horovod wheel ``recipe`` needs."""
    horovod = horovod_of(recipe)
    with_mpi = dict(horovod.build_env).get("HOROVOD_WITH_MPI") == "1"
    mpi = debian_package_version("libopenmpi-dev") if with_mpi else "none"
    return content_key("horovod", horovod.version, horovod.sdist_sha256, "tensorflow", horovod.tensorflow,
                       "python", python_version(), "mpi", mpi, repr(sorted(horovod.build_env)),
                       str(recipe.source_date_epoch), source_fingerprint(Path(__file__)))[:16]


def ensure_horovod_wheel(recipe: Recipe, wheelhouse: Path, log: Path) -> Path:
    """The Horovod wheel for ``recipe``, compiled once (debug info stripped) and cached.

    The requirements must include ``wheel``, whose command line repacks the stripped wheel.
    """
    horovod = horovod_of(recipe)
    key = horovod_wheel_key(recipe)
    final = cache_root() / "wheels" / f"horovod-{horovod.version}-tf{horovod.tensorflow}-{key}"
    found = _complete(final, "horovod-*.whl")
    if found:
        return found[0]
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        venv = tmp / "venv"
        run_step([BUILD_PYTHON, "-m", "venv", str(venv)], log)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        run_step(pip + ["install", "--no-index", "--find-links", str(wheelhouse), "--require-hashes",
                        "-r", str(recipe.requirements)], log)
        site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        env = dict(os.environ, MAKEFLAGS=f"-j{os.cpu_count() or 1}", SOURCE_DATE_EPOCH=str(recipe.source_date_epoch))
        env.update({k: v.format(site_packages=site) for k, v in horovod.build_env})
        # Horovod's sources, checked against the recipe's sha256, unpacked here so that every path the compiler
        # sees (sources, TensorFlow's headers in the venv) is under tmp, which -ffile-prefix-map renames: no random
        # directory name reaches the shared object, and the same recipe gives the same wheel
        sdist = tmp / "horovod-sdist.txt"
        sdist.write_text(f"horovod=={horovod.version} --hash=sha256:{horovod.sdist_sha256}\n")
        run_step(pip + ["download", "--no-cache-dir", "--no-deps", "--no-binary=:all:", "--require-hashes",
                        "-r", str(sdist), "-d", str(tmp / "sdist")], log)
        (archive,) = sorted((tmp / "sdist").glob("horovod-*.tar.gz"))
        with tarfile.open(archive) as tar:  # checked by its sha256 above (Debian's Python 3.11.2 has no filter=)
            tar.extractall(tmp / "src")
        tree = tmp / "src" / f"horovod-{horovod.version}"
        mapped = f"-ffile-prefix-map={tmp}={PREFIX_MAP_TARGET}"
        env.update(CFLAGS=mapped, CXXFLAGS=mapped)
        raw = tmp / "raw"
        run_step(pip + ["wheel", "--no-cache-dir", "--no-build-isolation", "--no-deps", str(tree), "-w", str(raw)],
                 log, env=env)
        built = sorted(raw.glob("horovod-*.whl"))
        if len(built) != 1:
            raise BuildError(f"pip wheel produced {len(built)} Horovod wheels in {raw}, expected one (log: {log})")
        _strip_wheel(venv, built[0], tmp, log, recipe.source_date_epoch)
        for part in (venv, raw, tmp / "src", tmp / "sdist"):
            shutil.rmtree(part)
        sdist.unlink()
        _finish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(final.glob("horovod-*.whl"))[0]


def _strip_wheel(venv: Path, wheel: Path, out_dir: Path, log: Path, epoch: int) -> None:
    """Repack ``wheel`` into ``out_dir`` with debug info stripped from its shared objects (57 MB to 2 MB); the
    archive's timestamps are ``epoch`` (wheel honours SOURCE_DATE_EPOCH)."""
    unpack = out_dir / "unpacked"
    run_step([str(venv / "bin" / "wheel"), "unpack", "-d", str(unpack), str(wheel)], log)
    (tree,) = list(unpack.iterdir())
    objects = [str(p) for p in tree.rglob("*.so")]
    if objects:
        run_step(["strip", "--strip-debug", *objects], log)
    run_step([str(venv / "bin" / "wheel"), "pack", "-d", str(out_dir), str(tree)], log,
             env=dict(os.environ, SOURCE_DATE_EPOCH=str(epoch)))
    shutil.rmtree(unpack)
