"""Test bed: an ordinary user, a registry on 127.0.0.1, and the images it serves.

The suite runs as root (CI does); root only installs, builds images and starts the registry. Everything udocker,
Horovod and hvdflow do on the real path runs as the ordinary user ``$HVDFLOW_TEST_USER`` (default ``hvdflow-ci``),
from a copy of the tree in that user's home and a venv made from Debian's ``/usr/bin/python3``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers import build_tiny_layout  # noqa: E402
from hvdflow.images.build.image import BuiltImage, push_image  # noqa: E402
from hvdflow.images.catalog import load_catalog  # noqa: E402
from hvdflow.testbed.cluster import alive, default_layout  # noqa: E402
from hvdflow.testbed.registry_server import start_registry  # noqa: E402
from lane_images import LANE_IMAGES, build_for_tests, image_order  # noqa: E402

pytest_plugins = ("pipeline_fixtures",)

# A suite started in the background by a shell without job control (`nohup bash scripts/test.sh &`) inherits SIGINT
# ignored, and so would every process it starts: the Ctrl-C tests would then send a signal nothing can receive. A
# terminal's Ctrl-C is what they model, so the processes they start get SIGINT's default back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TEST_USER = os.environ.get("HVDFLOW_TEST_USER", "hvdflow-ci")
LANE = os.environ.get("HVDFLOW_TEST_LANE", "")
"""Which lane of scripts/test.sh this session is (``testbed`` or ``rest``); empty for a plain pytest run."""
WORKSPACE_PARTS = ("src", "containers", "requirements", "scripts", "pyproject.toml", "workflow", "config", "profiles",
                   "examples")


def slurm_client_env() -> dict[str, str]:
    """``SLURM_CONF`` naming the test bed's configuration while its controller runs, as a site's login environment
    names its cluster's; nothing while it is down (a machine without Slurm), so that a Slurm client fails at once
    rather than waiting 10 s for a controller that is not there: the Slurm plugin asks ``scontrol show config``
    whenever Snakemake starts, whatever the profile."""
    layout = default_layout()
    return {"SLURM_CONF": str(layout.etc / "slurm.conf")} if alive(layout.run / "slurmctld.pid") else {}


def environ_with_slurm_client() -> dict[str, str]:
    """This process's environment with :func:`slurm_client_env`'s ``SLURM_CONF`` (or none) in place of its own."""
    return {**{k: v for k, v in os.environ.items() if k != "SLURM_CONF"}, **slurm_client_env()}


@dataclass(frozen=True)
class HpcUser:
    """The ordinary user who runs the real path, with a copy of the tree and a venv of its own."""

    name: str
    uid: int
    gid: int
    home: Path
    workspace: Path
    venv: Path
    tests_dir: Path
    """This session's folder in the user's home (one per lane of scripts/test.sh, which run at once)."""

    def env(self, extra: Mapping[str, str] = {}) -> dict[str, str]:
        """A clean login-like environment for the user, with hvdflow importable."""
        env = {
            "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8",
            "PATH": f"{self.venv}/bin:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(self.workspace / "src"),
            "HVDFLOW_CACHE": str(self.home / ".cache" / "hvdflow"),
            **slurm_client_env(),
        }
        env.update(extra)
        return env

    def run(self, argv: Sequence[str], extra_env: Mapping[str, str] = {}, timeout: float = 1800,
            check: bool = False, cwd: Optional[Path] = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as the user in ``cwd`` (default: the workspace); capture text output."""
        proc = subprocess.run(self.argv(argv, extra_env), cwd=cwd or self.workspace,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def argv(self, argv: Sequence[str], extra_env: Mapping[str, str] = {}) -> list[str]:
        """``argv`` as the user, in the user's clean environment (:meth:`env`)."""
        return ["runuser", "-u", self.name, "--", "env", "-i", *(f"{k}={v}" for k, v in self.env(extra_env).items()),
                *argv]

    def hvdflow(self, *args: str, extra_env: Mapping[str, str] = {}, timeout: float = 1800,
                check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the hvdflow command as the user."""
        return self.run([str(self.venv / "bin" / "python"), "-m", "hvdflow", *args], extra_env, timeout, check)

    def mkdir(self, path: Path) -> Path:
        """A directory owned by the user."""
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        return path


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def ordinary_user(name: str) -> pwd.struct_passwd:
    """The ordinary user ``name``, created with a home if missing (the suite runs as root)."""
    if os.geteuid() != 0:
        pytest.fail("the test suite runs as root (it creates the test users and starts services); use scripts/test.sh")
    for _ in range(100):  # the other lane of scripts/test.sh may be creating it (useradd locks /etc/passwd)
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        made = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], capture_output=True, text=True)
        if made.returncode not in (0, 1, 9, 10):  # 1: /etc/passwd locked, 9: made meanwhile, 10: /etc/group locked
            raise AssertionError(f"useradd {name} failed ({made.returncode}): {made.stderr}")
        time.sleep(0.1)
    raise AssertionError(f"user {name} could not be created: {made.stderr}")


@pytest.fixture(scope="session")
def hpc_user() -> HpcUser:
    """The ordinary user (created if missing), a fresh copy of the tree in its home, and its venv."""
    entry = ordinary_user(TEST_USER)
    home = Path(entry.pw_dir)
    tests_dir = home / ("hvdflow-tests" + (f"-{LANE}" if LANE else ""))
    if tests_dir.exists():
        shutil.rmtree(tests_dir)
    workspace = tests_dir / "tree"
    workspace.mkdir(parents=True)
    for part in WORKSPACE_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, workspace / part, ignore=shutil.ignore_patterns("__pycache__", "images.lock.yaml"))
        else:
            shutil.copy2(source, workspace / part)
    _chown_tree(tests_dir, entry.pw_uid, entry.pw_gid)
    key = subprocess.run(["bash", "-c", f"source {workspace}/scripts/lib.sh && venv_key"], capture_output=True,
                         text=True, check=True).stdout.strip()
    venv = home / ".cache" / "hvdflow" / f"venv-{key}"
    user = HpcUser(TEST_USER, entry.pw_uid, entry.pw_gid, home, workspace, venv, tests_dir)
    user.run(["bash", "-c", f"source scripts/lib.sh && ensure_venv {venv}"], check=True, timeout=900)
    return user


@pytest.fixture
def user_tmp(hpc_user: HpcUser) -> Path:
    """A fresh directory of the test's own, owned by the ordinary user."""
    return hpc_user.mkdir(hpc_user.tests_dir / f"t-{uuid.uuid4().hex[:8]}")


@dataclass(frozen=True)
class Registry:
    """A running registry: its URL and the directory its blobs are stored under."""

    url: str
    storage: Path

    def blob_path(self, digest: str) -> Path:
        """Where the registry keeps the blob ``digest`` on disk."""
        hexdigest = digest.split(":", 1)[1]
        return self.storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexdigest[:2] / hexdigest / "data"


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """Debian's docker-registry on a free port of 127.0.0.1, for the whole session."""
    state = tmp_path_factory.mktemp("registry")
    proc, url = start_registry(state)
    try:
        yield Registry(url, state / "storage")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def build_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Log of image builds and pushes made by the fixtures."""
    return tmp_path_factory.mktemp("build") / "build.log"


@pytest.fixture(scope="session")
def cpu_image(registry: Registry, build_log: Path) -> BuiltImage:
    """The hvdflow-cpu image, built from its recipe (or from ~/.cache/hvdflow: :func:`lane_images.build_for_tests`)
    and pushed to the test registry."""
    return _built_and_pushed(LANE_IMAGES["cpu_image"], registry, build_log)


@pytest.fixture(scope="session")
def oldest_image(registry: Registry, build_log: Path) -> BuiltImage:
    """The oldest stack hvdflow claims (hvdflow-cpu-oldest: Debian 11, Python 3.9, TensorFlow 2.9.3), built like
    ``cpu_image``: its Horovod compiled in a Debian 11 build root (about 4 minutes on a cold cache)."""
    return _built_and_pushed(LANE_IMAGES["oldest_image"], registry, build_log)


@pytest.fixture(scope="session")
def torch_image(registry: Registry, build_log: Path) -> BuiltImage:
    """The PyTorch image (hvdflow-torch-cpu: Debian 13, torch 2.6.0, Horovod 0.28.1 compiled for torch in a Debian
    13 build root), built like ``cpu_image`` and pushed to the test registry."""
    return _built_and_pushed(LANE_IMAGES["torch_image"], registry, build_log)


def _built_and_pushed(name: str, registry: Registry, build_log: Path) -> BuiltImage:
    image = build_for_tests(name, build_log)
    spec = load_catalog(REPO / "containers" / "catalog.yaml")[name]
    push_image(image, registry.url, spec.repository, spec.tag, build_log)
    return image


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test bed's lane runs its tests of each image in the order scripts/test.sh builds the images beside the
    lanes (:data:`lane_images.LANE_IMAGES`): the PyTorch and the oldest stack's tests last, when their images are
    built (they waited 461 s and 311 s for them, in set-up, at 7fd8db2). A stable sort after pytest's own grouping."""
    if LANE == "testbed":
        items.sort(key=lambda item: image_order(list(getattr(item, "fixturenames", []))))


@pytest.fixture
def tiny_repo(registry: Registry, build_log: Path, tmp_path: Path) -> "TinyRepo":
    """A fresh repository name in the test registry, with a helper to push busybox images into it."""
    return TinyRepo(registry, build_log, tmp_path, f"test/tiny-{uuid.uuid4().hex[:8]}")


@dataclass(frozen=True)
class TinyRepo:
    """Pushes small real images (busybox-static) under one repository of the test registry."""

    registry: Registry
    log: Path
    tmp: Path
    repository: str

    def push(self, tag: str, marker: str = "", broken_tar: bool = False) -> BuiltImage:
        """Build a busybox image whose /marker holds ``marker`` and push it as ``repository:tag``.

        The marker defaults to the repository name, so no two tests share a layer blob in the registry (one test
        corrupts a blob in the registry's storage).
        """
        marker = marker or self.repository
        image = build_tiny_layout(self.tmp / f"layout-{tag}-{marker.replace('/', '_')}", tag, marker, broken_tar)
        push_image(image, self.registry.url, self.repository, tag, self.log)
        return image

    def catalog(self, user: HpcUser, tag: str, name: str = "tiny") -> Path:
        """A catalogue, owned by the user, with one image ``name`` = ``repository:tag``."""
        directory = user.mkdir(user.tests_dir / f"catalog-{uuid.uuid4().hex[:8]}")
        path = directory / "catalog.yaml"
        path.write_text(
            "images:\n"
            f"  {name}:\n"
            "    description: busybox test image\n"
            f"    repository: {self.repository}\n"
            f"    tag: {tag}\n"
            "    device: cpu\n    python: none\n    tensorflow: none\n    horovod: none\n    mpi: none\n"
            "    execmode: P1\n    purposes: [train]\n    tested: true\n"
        )
        os.chown(path, user.uid, user.gid)
        return path


@pytest.fixture(scope="session")
def udocker_dir(hpc_user: HpcUser, cpu_image: BuiltImage) -> Path:
    """The session's udocker directory (the smoke tests pull into the same one)."""
    return hpc_user.mkdir(hpc_user.tests_dir / "cpu") / "udocker"
