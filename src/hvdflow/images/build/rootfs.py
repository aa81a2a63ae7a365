"""The root filesystem of an image: Debian from the host's apt sources (mmdebstrap), then the pinned wheels."""

from __future__ import annotations

import shutil
from pathlib import Path

from hvdflow.images.build.commands import run_step
from hvdflow.images.recipe import Recipe

_STAGE = "tmp/hvdflow-wheels"
# What an image does not need: package caches, logs, and device nodes (the container runtime provides /dev).
_CLEAN = ("var/cache/apt", "var/lib/apt/lists", "var/log", "root/.cache", "dev")


def horovod_check(recipe: Recipe) -> str:
    """Python code that fails unless Horovod imports with TensorFlow and has the controllers the recipe asks for."""
    switches = dict(recipe.horovod.build_env)
    checks = [f"hvd.{name}_built()" for name, flag in (("gloo", "HOROVOD_WITH_GLOO"), ("mpi", "HOROVOD_WITH_MPI"))
              if switches.get(flag) == "1"]
    return ("import horovod, horovod.tensorflow as hvd, tensorflow as tf\n"
            f"assert tf.__version__ == {recipe.horovod.tensorflow!r}, tf.__version__\n"
            + "".join(f"assert {check}, {check!r}\n" for check in checks)
            + "print('tensorflow', tf.__version__, 'horovod', horovod.__version__)")


def build_rootfs(recipe: Recipe, wheelhouse: Path, horovod_wheel: Path, dest: Path, log: Path) -> None:
    """Build the image's root filesystem in ``dest`` (which must not exist) and check that Horovod loads in it."""
    run_step(["mmdebstrap", f"--variant={recipe.variant}",
              "--include=" + ",".join(recipe.apt_packages), recipe.suite, str(dest)], log)
    stage = dest / _STAGE
    shutil.copytree(wheelhouse, stage)
    shutil.copy2(recipe.requirements, stage / "requirements.txt")
    shutil.copy2(horovod_wheel, stage / horovod_wheel.name)
    in_root = ["chroot", str(dest), "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8"]
    run_step(in_root + ["python3", "-m", "pip", "install", "--no-index", "--no-cache-dir", "--break-system-packages",
                        "--no-warn-script-location", "--find-links", f"/{_STAGE}",
                        "-r", f"/{_STAGE}/requirements.txt", f"/{_STAGE}/{horovod_wheel.name}"], log)
    run_step(in_root + ["python3", "-c", horovod_check(recipe)], log)
    for rel in _CLEAN:
        target = dest / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
            target.mkdir(mode=0o755)
    shutil.rmtree(dest / _STAGE, ignore_errors=True)
