"""Node scratch shared with other users, as on a real cluster: two ordinary users on this machine, a world-writable
sticky scratch folder like /tmp, and the very staging program a Slurm job step runs (``python -m
hvdflow.slurm.staging``, the host's /usr/bin/python3, as each user). A link or a folder another user prepared at the
job's path is refused by name and nothing outside the user's own private folder is written or deleted; the staged
files are the user's alone; the sweep and the clean-up touch only the user's own folders."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO, TEST_USER, _chown_tree, ordinary_user
from hvdflow.config.profile import load_profile
from hvdflow.errors import ConfigError, LaunchError
from hvdflow.files.private import UnsafePlace
from hvdflow.launch.local import ranks_tmpdir
from hvdflow.runtime.udocker.client import Udocker
from hvdflow_index import FORMAT

OTHER_USER = "hvdflow-other"


class Node:
    """A node's scratch (mode 1777, like /tmp), the owner and another user, and a copy of src/ both can read."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.owner, self.other = ordinary_user(TEST_USER), ordinary_user(OTHER_USER)
        self.scratch = base / "scratch"
        self.scratch.mkdir()
        self.scratch.chmod(0o1777)
        self.src = base / "src"
        shutil.copytree(REPO / "src", self.src, ignore=shutil.ignore_patterns("__pycache__"))
        self.user_dir = self.scratch / f"hvdflow-{self.owner.pw_name}"
        self.victim = base / "victim"  # the owner's own files, elsewhere
        (self.victim / "dataset").mkdir(parents=True)
        (self.victim / "dataset" / "important.txt").write_text("the owner's work\n")
        self.dataset = base / "prepared"
        _write_dataset(self.dataset)
        for path in (self.victim, self.dataset, base / "reports"):
            path.mkdir(exist_ok=True)
            _chown_tree(path, self.owner.pw_uid, self.owner.pw_gid)
        base.chmod(0o755)

    def run(self, user: pwd.struct_passwd, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``argv`` as ``user``, with this copy of src/ importable."""
        environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(self.src), "HOME": user.pw_dir, **(env or {})}
        return subprocess.run(["runuser", "-u", user.pw_name, "--", "env", "-i",
                               *[f"{k}={v}" for k, v in environment.items()], *argv],
                              capture_output=True, text=True, timeout=120, cwd=self.base)

    def stage(self, job: str, live: str) -> subprocess.CompletedProcess[str]:
        """The staging step's first task on this node, as the owner, for job ``job``."""
        dest = self.user_dir / f"job-{job}" / "dataset"
        return self.run(self.owner, "/usr/bin/python3", "-m", "hvdflow.slurm.staging", "stage", str(self.dataset),
                        str(dest), str(self.base / "reports"), live,
                        env={"SLURM_LOCALID": "0", "SLURM_PROCID": "0"})

    def clean(self, job: str) -> subprocess.CompletedProcess[str]:
        """The clean-up step's task on this node, as the owner."""
        return self.run(self.owner, "/usr/bin/python3", "-m", "hvdflow.slurm.staging", "clean",
                        str(self.user_dir / f"job-{job}"))


def _write_dataset(folder: Path) -> None:
    """A prepared dataset of two small shards and its index (what staging copies and verifies)."""
    (folder / "train").mkdir(parents=True)
    shards = []
    for i in range(2):
        shard = folder / "train" / f"shard-{i}.tfrecord"
        shard.write_bytes(os.urandom(4096))
        shards.append({"file": f"train/{shard.name}", "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()})
    (folder / "index.json").write_text(json.dumps({"format": FORMAT, "splits": {"train": {"shards": shards}}}))


def listing(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root`` (links not followed): owner, mode and content or link target."""
    entries = {}
    for path in sorted([root, *root.rglob("*")]):
        st = os.lstat(path)
        content = (os.readlink(path) if stat.S_ISLNK(st.st_mode)
                   else path.read_text() if stat.S_ISREG(st.st_mode) else "<dir>")
        entries[str(path)] = (st.st_uid, stat.S_IMODE(st.st_mode), content)
    return entries


@pytest.fixture
def node() -> Iterator[Node]:
    base = Path(tempfile.mkdtemp(prefix="hvdflow-shared-", dir="/tmp"))
    try:
        yield Node(base)
    finally:
        shutil.rmtree(base)


def test_a_link_at_the_users_scratch_folder_is_refused_and_nothing_it_points_to_is_touched(node: Node) -> None:
    link = node.run(node.other, "ln", "-s", str(node.victim), str(node.user_dir))
    assert link.returncode == 0, link.stderr
    # the old layout's predictable name too: nothing writes there any more
    node.run(node.other, "ln", "-s", str(node.victim), str(node.scratch / "hvdflow-job-999"))
    before = listing(node.victim)
    proc = node.stage("999", "999")
    assert proc.returncode == 1
    assert (f"node-local scratch on {os.uname().nodename}: {node.user_dir} is a symbolic link (owned by uid "
            f"{node.other.pw_uid}): refusing to stage there") in proc.stderr, proc.stderr
    assert listing(node.victim) == before
    assert node.clean("999").returncode == 1 and listing(node.victim) == before
    assert sorted(p.name for p in node.scratch.iterdir()) == [node.user_dir.name, "hvdflow-job-999"]


@pytest.mark.parametrize("mode", ["0777", "0700"])  # open to all, or closed even to the user it pretends to be
def test_a_folder_another_user_made_at_the_users_name_is_refused_and_left_as_it_was(node: Node, mode: str) -> None:
    made = node.run(node.other, "bash", "-c", f"mkdir -m {mode} {node.user_dir} && echo bait > {node.user_dir}/file")
    assert made.returncode == 0, made.stderr
    before = listing(node.user_dir)
    proc = node.stage("999", "999")
    assert proc.returncode == 1
    assert f"{node.user_dir} belongs to uid {node.other.pw_uid}: refusing to stage there" in proc.stderr, proc.stderr
    assert listing(node.user_dir) == before
    assert not (node.base / "reports" / "task-0.json").exists()


def test_the_users_own_folder_writable_by_others_is_refused(node: Node) -> None:
    assert node.run(node.owner, "mkdir", "-m", "0777", str(node.user_dir)).returncode == 0
    node.run(node.owner, "chmod", "0777", str(node.user_dir))
    proc = node.stage("999", "999")
    assert proc.returncode == 1
    assert f"{node.user_dir} is writable by others (mode 0777): refusing to" in proc.stderr, proc.stderr
    assert sorted(p.name for p in node.user_dir.iterdir()) == []


def test_staged_files_are_the_users_alone_and_the_sweep_and_clean_up_touch_only_the_users_folders(node: Node) -> None:
    # another user's own jobs on the same node, and an ended job of the owner's
    assert node.run(node.other, "mkdir", "-p", str(node.scratch / f"hvdflow-{node.other.pw_name}" / "job-7")).returncode == 0
    theirs = listing(node.scratch / f"hvdflow-{node.other.pw_name}")
    assert node.stage("7", "7").returncode == 0
    proc = node.stage("8", "8")
    assert proc.returncode == 0, proc.stderr
    assert f"removed {node.user_dir / 'job-7'}" in proc.stderr
    dest = node.user_dir / "job-8" / "dataset"
    assert sorted(p.name for p in node.user_dir.iterdir()) == ["job-8"]
    assert sorted(p.name for p in (node.user_dir / "job-8").iterdir()) == ["dataset", "tmp"]  # tmp: the ranks' TMPDIR
    assert listing(node.scratch / f"hvdflow-{node.other.pw_name}") == theirs
    for path in [node.user_dir, *node.user_dir.rglob("*")]:
        st = os.lstat(path)
        assert st.st_uid == node.owner.pw_uid, path
        assert stat.S_IMODE(st.st_mode) == (0o700 if stat.S_ISDIR(st.st_mode) else 0o600), (path, oct(st.st_mode))
    shard = dest / "train" / "shard-0.tfrecord"
    assert shard.read_bytes() == (node.dataset / "train" / "shard-0.tfrecord").read_bytes()
    peek = node.run(node.other, "cat", str(shard))
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    assert "Permission denied" in node.run(node.other, "ls", str(node.user_dir)).stderr
    assert node.clean("8").returncode == 0
    assert node.user_dir.is_dir() and list(node.user_dir.iterdir()) == []
    assert listing(node.scratch / f"hvdflow-{node.other.pw_name}") == theirs


def test_the_local_ranks_tmpdir_is_private_and_no_link_there_is_followed(tmp_path: Path) -> None:
    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    (elsewhere / "keep").mkdir(parents=True)
    logs.mkdir()
    (logs / "tmp").symlink_to(elsewhere)  # left at the ranks' TMPDIR: removed as a link, its target untouched
    with ranks_tmpdir(logs) as env:
        tmp = Path(env["TMPDIR"])
        assert tmp == logs / "tmp" and not tmp.is_symlink() and stat.S_IMODE(tmp.stat().st_mode) == 0o700
        (tmp / "__autograph_generated_file.py").write_text("")
    assert not os.path.lexists(logs / "tmp") and (elsewhere / "keep").is_dir()
    (logs / "tmp").mkdir()
    os.chown(logs / "tmp", 65534, 65534)  # another user's folder at that name (the suite runs as root)
    with pytest.raises(LaunchError, match=f"{logs / 'tmp'} belongs to uid 65534: refusing to give the ranks a TMPDIR"):
        with ranks_tmpdir(logs):
            pass
    assert (logs / "tmp").is_dir()


def test_a_udocker_directory_on_shared_scratch_must_be_the_users_alone(node: Node) -> None:
    udocker_dir = node.scratch / "udocker"
    assert node.run(node.other, "mkdir", "-m", "0755", str(udocker_dir)).returncode == 0
    with pytest.raises(UnsafePlace, match=f"{udocker_dir} belongs to uid {node.other.pw_uid}: refusing to keep "
                                          f"udocker's images and containers there"):
        Udocker(udocker_dir, allow_root=True).prepare()
    assert list(udocker_dir.iterdir()) == []
    udocker_dir.rmdir()
    udocker_dir.symlink_to(node.victim)
    before = listing(node.victim)
    with pytest.raises(UnsafePlace, match=f"{udocker_dir} is a symbolic link"):
        Udocker(udocker_dir, allow_root=True).prepare()
    assert listing(node.victim) == before


def test_scratch_dir_tmpdir_is_the_jobs_own_expanded_inside_the_job_not_on_the_login_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hvdflow.yaml"
    path.write_text("registry: http://127.0.0.1:5000\nruntime: {kind: udocker}\nlauncher: gloo\nscheduler: slurm\n"
                    "slurm: {scratch_dir: $TMPDIR, gpus_per_node: 0}\n")
    monkeypatch.delenv("TMPDIR", raising=False)
    cluster = load_profile(path).slurm  # the login node: no TMPDIR, and none needed there
    assert cluster is not None and cluster.scratch_dir == "$TMPDIR"
    with pytest.raises(ConfigError, match=r"slurm.scratch_dir: environment variable \$TMPDIR is not set"):
        cluster.job_scratch_dir()
    monkeypatch.setenv("TMPDIR", "/tmp/job-4711")  # inside the job, where the site sets a private one
    assert cluster.job_scratch_dir() == Path("/tmp/job-4711")
    path.write_text(path.read_text().replace("$TMPDIR", "scratch"))
    with pytest.raises(ConfigError, match="scratch_dir: must be an absolute path or start with a variable"):
        load_profile(path)
