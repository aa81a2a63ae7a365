"""Where an image's Python wheels are resolved and its Horovod wheel compiled: by the interpreter the image runs.

An image of the host's Debian release is served by the host's ``/usr/bin/python3`` (the native runtime's venv needs
that very wheel, built without root). An image of another release (the oldest stack, Debian 11 with Python 3.9) gets
a build root: that release's python3 and compilers, made once by mmdebstrap from the host's apt sources and cached;
the compile runs in it under ``chroot``. Either way the wheelhouse is downloaded on the host (the build root has no
network set up) for the toolchain's interpreter and glibc.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from hvdflow.files.cache import cache_root, content_key, source_fingerprint
from hvdflow.images.build.commands import BuildError, run_step
from hvdflow.images.build.rootless import mmdebstrap_mode
from hvdflow.images.recipe import DEFAULT_COMPONENTS, Recipe

HOST_PYTHON = "/usr/bin/python3"
BUILD_ROOT_PACKAGES = ("python3", "python3-venv", "python3-dev", "binutils")
"""What every build root holds besides the recipe's ``horovod.build_apt_packages``."""
UNSHARE = "/usr/bin/unshare"
CHROOT = "/usr/sbin/chroot"
"""Debian's chroot, named by path: an ordinary user's PATH (a rootless build) has no /usr/sbin."""
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PROBE = "import os, platform; print(platform.python_version()); print(os.confstr('CS_GNU_LIBC_VERSION').split()[1])"
OLDEST_MANYLINUX_GLIBC_MINOR = 5
"""manylinux1 is glibc 2.5: the oldest platform tag a Linux wheel may carry."""


@dataclass(frozen=True)
class Toolchain:
    """An interpreter and compilers: the host's (``root`` None) or those of a build root used through chroot."""

    root: Optional[Path]
    python_version: str
    """Full version, ``3.9.2``."""
    glibc: str
    """``2.31``: which manylinux wheels the interpreter takes."""

    def argv(self, argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> list[str]:
        """``argv`` as run by this toolchain: in the build root (:func:`chroot_argv`), or as is on the host (whose
        callers pass ``env`` to the process instead)."""
        return list(argv) if self.root is None else chroot_argv(self.root, argv, env)

    def run(self, argv: Sequence[str], log: Path, env: Optional[Mapping[str, str]] = None) -> None:
        """Run ``argv`` with ``env`` added to its environment, by this toolchain, appending its output to ``log``."""
        if self.root is None:
            run_step(argv, log, env=None if env is None else {**os.environ, **env})
        else:
            run_step(chroot_argv(self.root, argv, env), log)

    def output(self, argv: Sequence[str]) -> str:
        """What ``argv``, run by this toolchain, prints (stripped)."""
        return subprocess.run(self.argv(argv), check=True, capture_output=True, text=True).stdout.strip()

    def path(self, host_path: Path) -> str:
        """How the toolchain's processes see ``host_path`` (which must lie in the build root, if there is one)."""
        return str(host_path) if self.root is None else "/" + str(host_path.relative_to(self.root))

    def work_dir(self, parent: Path, prefix: str) -> Path:
        """A new temporary directory the toolchain's processes can reach: under ``parent`` on the host, under the
        build root's /build otherwise."""
        base = parent if self.root is None else self.root / "build"
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=base, prefix=prefix))

    def package_version(self, package: str) -> str:
        """The installed version of a Debian package of the toolchain, or a BuildError saying it is missing."""
        return debian_package_version(package, self.root)

    def pip_target(self) -> list[str]:
        """pip options that choose wheels for this interpreter and glibc, whatever interpreter runs pip."""
        major, minor = self.python_version.split(".")[:2]
        glibc_minor = int(self.glibc.split(".")[1])
        platforms = [f"manylinux_2_{m}_x86_64" for m in range(glibc_minor, OLDEST_MANYLINUX_GLIBC_MINOR - 1, -1)]
        platforms += [legacy for legacy, m in (("manylinux2014_x86_64", 17), ("manylinux2010_x86_64", 12),
                                               ("manylinux1_x86_64", 5)) if m <= glibc_minor]
        # the full version: Requires-Python may exclude micro releases (cryptography: != 3.9.0, != 3.9.1)
        options = ["--implementation", "cp", "--python-version", self.python_version, "--abi", f"cp{major}{minor}"]
        for platform in [*platforms, "linux_x86_64"]:
            options += ["--platform", platform]
        return options


def debian_package_version(package: str, root: Optional[Path] = None) -> str:
    """The installed version of a Debian package of the host (or of the Debian root ``root``), or a BuildError
    saying it is missing."""
    admin = [] if root is None else [f"--admindir={root}/var/lib/dpkg"]
    proc = subprocess.run(["dpkg-query", *admin, "-W", "-f", "${Version}", package], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout:
        where = "the host" if root is None else f"the build root {root}"
        raise BuildError(f"Debian package {package} is not installed on {where}; building the image needs it (the "
                         "recipe's build_apt_packages)")
    return proc.stdout.strip()


_WITH_PROC = 'mount --rbind /proc "$0/proc" && exec ' + CHROOT + ' "$0" "$@"'
"""The shell line that gives a chroot the host's /proc (torch's build asks /proc/cpuinfo, UCX the boot id) in a
mount namespace of its own, which ends with the command: nothing stays mounted in the root afterwards."""


def chroot_argv(root: Path, argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> list[str]:
    """``argv`` run in the Debian root ``root`` by chroot, with /proc and a clean environment plus ``env``."""
    extra = [f"{k}={v}" for k, v in sorted((env or {}).items())]
    return [UNSHARE, "--mount", "--propagation", "private", "--", "sh", "-c", _WITH_PROC, str(root),
            "env", "-i", _PATH, "HOME=/root", "LANG=C.UTF-8", *extra, *argv]


def debian_options(recipe: Recipe) -> list[str]:
    """mmdebstrap's options for the recipe's Debian sources and debconf answers, for the image's root filesystem and
    the build root alike: ``--components`` where the recipe names more than ``main`` (without it mmdebstrap takes
    main only, and the command of a main-only recipe stays what it always was), and one ``--essential-hook`` per
    debconf answer, which ``debconf-set-selections`` records once the essential packages are in and before apt
    installs the recipe's (mmdebstrap's documented way)."""
    options = [] if recipe.components == DEFAULT_COMPONENTS else ["--components=" + ",".join(recipe.components)]
    return options + [f'--essential-hook=echo {shlex.quote(line)} | chroot "$1" debconf-set-selections'
                      for line in recipe.debconf]


def _probe(argv: list[str]) -> tuple[str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    version, glibc = proc.stdout.split()
    return version, glibc


def host_toolchain() -> Toolchain:
    """The host's Debian python3 and compilers."""
    return Toolchain(None, *_probe([HOST_PYTHON, "-c", _PROBE]))


def host_suite() -> str:
    """The host's Debian release name (``bookworm``), from /etc/os-release."""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise BuildError("/etc/os-release names no VERSION_CODENAME: this host is not Debian")


def toolchain_for(recipe: Recipe, log: Path) -> Toolchain:
    """The toolchain of ``recipe``: the host's when the image is of the host's Debian release, else a build root."""
    if recipe.suite == host_suite():
        return host_toolchain()
    root = ensure_build_root(recipe, log)
    return Toolchain(root, *_probe(chroot_argv(root, ["python3", "-c", _PROBE])))


def build_root_packages(recipe: Recipe) -> list[str]:
    """The Debian packages of the build root of ``recipe``: python3 and the Horovod build's, sorted."""
    return sorted({*BUILD_ROOT_PACKAGES, *(recipe.horovod.build_apt_packages if recipe.horovod else ())})


def build_root_argv(recipe: Recipe, root: Path) -> list[str]:
    """The mmdebstrap command that makes the build root of ``recipe`` in ``root``."""
    return ["mmdebstrap", *mmdebstrap_mode(), "--variant=minbase", *debian_options(recipe),
            "--include=" + ",".join(build_root_packages(recipe)), recipe.suite, str(root)]


def made_toolchain(recipe: Recipe) -> Optional[Toolchain]:
    """The toolchain of ``recipe`` where it needs no making (the host's, or a build root already made); else None."""
    if recipe.suite == host_suite():
        return host_toolchain()
    final = _build_root_dir(recipe)
    if not (final / "COMPLETE").exists():
        return None
    return Toolchain(final / "root", *_probe(chroot_argv(final / "root", ["python3", "-c", _PROBE])))


def _build_root_dir(recipe: Recipe) -> Path:
    """Where the build root of ``recipe`` is cached (keyed by the release, its components, the debconf answers, the
    packages and this code)."""
    key = content_key(recipe.suite, "components", *recipe.components, "debconf", *recipe.debconf, "packages",
                      *build_root_packages(recipe), source_fingerprint(Path(__file__)))[:16]
    return cache_root() / "build-roots" / f"{recipe.suite}-{key}"


def ensure_build_root(recipe: Recipe, log: Path) -> Path:
    """A Debian root of the recipe's release with python3 and the Horovod build's packages, made once and cached."""
    final = _build_root_dir(recipe)
    if (final / "COMPLETE").exists():
        return final / "root"
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        run_step(build_root_argv(recipe, tmp / "root"), log)
        (tmp / "COMPLETE").write_text("")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final / "root"
