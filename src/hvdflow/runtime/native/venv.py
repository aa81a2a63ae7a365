"""The native runtime's venv: the image's pinned Python packages and Horovod wheel, on the host's Debian python3.

It exists to measure what the container costs: same TensorFlow, same Horovod build, same trainer, no udocker.
The wheels come from the same cached wheelhouse and Horovod wheel the image build uses (built once per user).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hvdflow.errors import ConfigError
from hvdflow.files.cache import content_key, sha256_file
from hvdflow.files.filelock import exclusive_lock
from hvdflow.images.build.commands import run_step
from hvdflow.images.build.toolchain import HOST_PYTHON, host_toolchain
from hvdflow.images.build.wheels import ensure_horovod_wheel, ensure_wheelhouse, pip_install_argvs
from hvdflow.images.catalog import get_image, load_catalog
from hvdflow.images.recipe import load_recipe

NATIVE_LOCK_TIMEOUT = 3600.0


def build_log(venv_dir: Path, image: str) -> Path:
    """Where the native venv of ``image`` logs its creation (the wheels' download, Horovod's compile, pip)."""
    return venv_dir / f"{image}.build.log"


def native_python(venv_dir: Path, image: str, catalog: Path) -> Path:
    """The interpreter of the native venv for ``image`` under ``venv_dir`` (created on first use, under a lock)."""
    spec = get_image(load_catalog(catalog), image, catalog)
    if spec.recipe is None:
        raise ConfigError(f"image {image} has no recipe in {catalog}: the native runtime needs its pinned packages")
    recipe = load_recipe(spec.recipe)
    host = host_toolchain()
    if not spec.python or not host.python_version.startswith(spec.python):
        raise ConfigError(f"image {image} has Python {spec.python}, the host's {HOST_PYTHON} is {host.python_version}: "
                          "the native runtime needs the same interpreter")
    with exclusive_lock(venv_dir / ".native.lock", NATIVE_LOCK_TIMEOUT, f"creating the native venv of {image}"):
        log = build_log(venv_dir, image)
        wheelhouse = ensure_wheelhouse(recipe, host, log)
        wheel = ensure_horovod_wheel(recipe, wheelhouse, host, log)
        venv = venv_dir / f"{image}-{content_key(recipe.fingerprint(), sha256_file(wheel))[:16]}"
        python = venv / "bin" / "python"
        if (venv / ".hvdflow-complete").exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        run_step([HOST_PYTHON, "-m", "venv", str(venv)], log)
        for argv in pip_install_argvs([str(python), "-m", "pip"], str(wheelhouse), str(recipe.requirements), str(wheel)):
            run_step(argv, log)
        subprocess.run([str(python), "-c", "import horovod.tensorflow"], check=True, capture_output=True)
        (venv / ".hvdflow-complete").write_text("")
        return python
