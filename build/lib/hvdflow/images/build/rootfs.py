"""The root filesystem of an image: Debian from the host's apt sources (mmdebstrap), then the pinned wheels.

Reproducible: mmdebstrap runs with the recipe's SOURCE_DATE_EPOCH and apt pinned (priority 1001) to the versions of
the recipe's Debian manifest, which the installed packages must then match exactly; the host's ``resolv.conf`` and
``hostname`` are not kept; pip installs by hash with SOURCE_DATE_EPOCH set, so Python compiles hash-checked ``.pyc``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from hvdflow.errors import ConfigError
from hvdflow.images.build.commands import BuildError, run_step
from hvdflow.images.build.pins import apt_preferences, check_debian_packages, read_debian_manifest, write_debian_manifest
from hvdflow.images.build.rootless import mmdebstrap_mode
from hvdflow.images.build.toolchain import chroot_argv, debian_options
from hvdflow.images.build.wheels import pip_install_argvs
from hvdflow.images.recipe import Recipe

_STAGE = "tmp/hvdflow-wheels"
# What an image does not need: package caches, logs, and device nodes (the container runtime provides /dev).
_CLEAN = ("var/cache/apt", "var/lib/apt/lists", "var/log", "root/.cache", "dev")


_PREFERENCES = "etc/apt/preferences.d/hvdflow-pins"


def horovod_check(recipe: Recipe) -> str:
    """Python code that fails unless Horovod imports with the recipe's framework (TensorFlow at its pinned version,
    or torch at Debian's upstream version) and has the controllers the recipe asks for, and NCCL where its GPU
    operations are NCCL's (a build flag: ``nccl_built()`` needs no GPU)."""
    assert recipe.horovod is not None
    switches = dict(recipe.horovod.build_env)
    checks = [f"hvd.{name}_built()" for name, flag in (("gloo", "HOROVOD_WITH_GLOO"), ("mpi", "HOROVOD_WITH_MPI"))
              if switches.get(flag) == "1"]
    if switches.get("HOROVOD_GPU_OPERATIONS") == "NCCL":
        checks.append("hvd.nccl_built()")
    framework, version = recipe.horovod.framework, recipe.horovod.framework_version
    module = {"tensorflow": "horovod.tensorflow", "torch": "horovod.torch"}[framework]
    return (f"import horovod, {module} as hvd, {framework} as fw\n"
            f"assert fw.__version__.split('+')[0] == {version!r}, fw.__version__\n"
            + "".join(f"assert {check}, {check!r}\n" for check in checks)
            + f"print({framework!r}, fw.__version__, 'horovod', horovod.__version__)")


def debian_env(source_date_epoch: int) -> dict[str, str]:
    """mmdebstrap's environment: this one without Python's variables, with the recipe's SOURCE_DATE_EPOCH and
    PYTHONDONTWRITEBYTECODE=1, so that every ``.pyc`` of the Debian part is py3compile's (hash-checked, as
    SOURCE_DATE_EPOCH asks) and none comes from py3compile's own imports (timestamped, and present or not as the
    builder's environment had it: the same recipe then gave two digests)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    return {**env, "SOURCE_DATE_EPOCH": str(source_date_epoch), "PYTHONDONTWRITEBYTECODE": "1"}


def installed_packages(root: Path) -> dict[str, str]:
    """``{package: version}`` of every Debian package installed in the root filesystem ``root``."""
    proc = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f", "${Package} ${Version}\\n"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"dpkg-query could not list the packages of {root}: {proc.stderr.strip()}")
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line)


def mmdebstrap_argv(recipe: Recipe, dest: Path, preferences: str) -> list[str]:
    """The mmdebstrap command that makes the Debian part of the image in ``dest``, apt pinned by the preferences
    file ``preferences`` (copied in before apt runs, removed with resolv.conf and hostname at the end)."""
    return ["mmdebstrap", *mmdebstrap_mode(), f"--variant={recipe.variant}", *debian_options(recipe),
            "--include=" + ",".join(recipe.apt_packages),
            f'--setup-hook=mkdir -p "$1"/etc/apt/preferences.d && cp {preferences} "$1"/{_PREFERENCES}',
            f'--customize-hook=rm -f "$1"/{_PREFERENCES} "$1"/etc/resolv.conf "$1"/etc/hostname',
            recipe.suite, str(dest)]


def _debian(recipe: Recipe, dest: Path, log: Path, mode: str) -> None:
    """mmdebstrap the Debian part into ``dest``, pinned to the recipe's manifest as ``mode`` (``pins.DEBIAN_MODES``)
    says."""
    pin = mode == "pin"
    if not pin and not recipe.debian_packages.is_file():
        raise ConfigError(f"{recipe.path}: debian_packages: {recipe.debian_packages} does not exist; write it once with "
                          "`hvdflow image build NAME --debian pin` (as root)")
    pinned = {} if pin else read_debian_manifest(recipe.debian_packages)
    env = debian_env(recipe.source_date_epoch)
    with tempfile.NamedTemporaryFile("w", suffix=".pref") as preferences:
        preferences.write(apt_preferences(pinned))
        preferences.flush()
        os.chmod(preferences.name, 0o644)
        run_step(mmdebstrap_argv(recipe, dest, preferences.name), log, env=env)
    found = installed_packages(dest)
    if pin:
        write_debian_manifest(recipe.debian_packages, found, recipe.suite)
        return
    moved = check_debian_packages(found, pinned, recipe.debian_packages, follow=mode == "follow")
    if moved:
        with open(log, "a") as out:
            out.write(f"hvdflow: following the mirror: {moved}\n")
        print(f"hvdflow: warning: {moved}", file=sys.stderr, flush=True)


def build_rootfs(recipe: Recipe, wheelhouse: Path, horovod_wheel: Optional[Path], dest: Path, log: Path,
                 debian: str = "check") -> None:
    """Build the image's root filesystem in ``dest`` (which must not exist) and check that Horovod loads in it;
    ``debian`` is what to do with the Debian manifest (``pins.DEBIAN_MODES``)."""
    _debian(recipe, dest, log, debian)
    stage = dest / _STAGE
    shutil.copytree(wheelhouse, stage)
    shutil.copy2(recipe.requirements, stage / "requirements.txt")
    # PIP_BREAK_SYSTEM_PACKAGES, not the option: bookworm's pip needs it, bullseye's pip 20.3 knows no such option
    build_env = {"SOURCE_DATE_EPOCH": str(recipe.source_date_epoch), "PIP_BREAK_SYSTEM_PACKAGES": "1"}
    in_root = chroot_argv(dest, [], build_env)
    pip = in_root + ["python3", "-m", "pip"]
    flags = ["--no-warn-script-location"]
    if horovod_wheel is not None:
        shutil.copy2(horovod_wheel, stage / horovod_wheel.name)
    staged_wheel = None if horovod_wheel is None else f"/{_STAGE}/{horovod_wheel.name}"
    requirements = f"/{_STAGE}/requirements.txt" if recipe.requirement_lines() else None
    for argv in pip_install_argvs(pip, f"/{_STAGE}", requirements, staged_wheel):
        run_step(argv + flags, log)
    if horovod_wheel is not None:  # with the image's environment too, as its containers have it (LD_LIBRARY_PATH)
        run_step(chroot_argv(dest, ["python3", "-c", horovod_check(recipe)], {**build_env, **dict(recipe.env)}), log)
    for rel in _CLEAN:
        target = dest / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
            target.mkdir(mode=0o755)
    if recipe.python_bytecode == "drop":
        for cache in sorted((dest / "usr").rglob("__pycache__"), reverse=True):
            shutil.rmtree(cache)
    shutil.rmtree(dest / _STAGE, ignore_errors=True)
