"""The lock: exclusive, names its holder's host and pid, times out with a message; on a filesystem that refuses flock
(a real FUSE mount whose flock answers ENOLCK, as NFS without a lock manager does) a lock file held by host and pid,
with stale holders of this host removed and another host's named."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO
from hvdflow.files.filelock import Holder, LockTimeout, exclusive_lock, filesystem_of

HOST = socket.gethostname()
HOLD = """
import sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from hvdflow.files.filelock import exclusive_lock
with exclusive_lock(Path({path!r}), 5, "test"):
    print("held", flush=True)
    time.sleep({seconds})
"""
COUNT = """
import sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from hvdflow.files.filelock import exclusive_lock
counter = Path({counter!r})
for _ in range(10):
    with exclusive_lock(Path({path!r}), 60, "counting"):
        value = int(counter.read_text())
        time.sleep(0.01)
        counter.write_text(str(value + 1))
"""


def _holder(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(src=str(REPO / "src"), path=str(path), seconds=seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_timeout_names_the_holder_host_and_pid(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    holder = _holder(lock, 10)
    try:
        with pytest.raises(LockTimeout, match=rf"pulling: {lock} is still held by pid {holder.pid} on {HOST} after 1 s"):
            with exclusive_lock(lock, 1, "pulling"):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_waits_until_released(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / "x.lock"
    holder = _holder(lock, 1.5)
    start = time.monotonic()
    with exclusive_lock(lock, 30, "pulling"):
        waited = time.monotonic() - start
    holder.wait()
    assert waited > 0.5
    assert f"waiting for {lock}, held by pid {holder.pid} on {HOST}" in capsys.readouterr().err


def test_lock_of_a_dead_process_is_free(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    holder = _holder(lock, 30)
    holder.kill()
    holder.wait()
    with exclusive_lock(lock, 1, "pulling"):
        now = Holder.parse(lock.read_text())
        assert now is not None and (now.host, now.pid) == (HOST, os.getpid())
    assert lock.read_text() == ""


@pytest.fixture(scope="module")
def noflock_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A FUSE filesystem (tests/fuse/noflock.c, built here) passing through to a folder, whose flock fails."""
    base = tmp_path_factory.mktemp("noflock")
    binary, backing, mount = base / "noflock", base / "backing", base / "mount"
    backing.mkdir()
    mount.mkdir()
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True, check=True)
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(REPO / "tests/fuse/noflock.c"), *flags.stdout.split()],
                   check=True)
    daemon = subprocess.Popen([str(binary), str(backing), str(mount), "-f"])
    deadline = time.monotonic() + 30
    while f" {mount} " not in Path("/proc/self/mountinfo").read_text():
        assert daemon.poll() is None and time.monotonic() < deadline, "the FUSE filesystem did not mount"
        time.sleep(0.05)
    try:
        yield mount
    finally:
        subprocess.run(["fusermount3", "-u", str(mount)], check=True)
        daemon.wait(timeout=30)
        assert f" {mount} " not in Path("/proc/self/mountinfo").read_text()


def test_the_mount_really_refuses_flock(noflock_mount: Path) -> None:
    import fcntl

    fd = os.open(noflock_mount / "probe", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No locks available"):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert filesystem_of(noflock_mount / "probe") == f"fuse.noflock at {noflock_mount}"


def test_where_flock_is_refused_a_held_file_names_the_holder_and_a_dead_ones_is_taken_over(
        noflock_mount: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = noflock_mount / "pull.lock"
    held = noflock_mount / "pull.lock.held"
    holder = _holder(lock, 30)
    try:
        assert Holder.parse(held.read_text()) is not None and Holder.parse(held.read_text()).pid == holder.pid  # type: ignore[union-attr]
        with pytest.raises(LockTimeout, match=rf"is still held by pid {holder.pid} on {HOST} after 1 s"):
            with exclusive_lock(lock, 1, "pulling"):
                pass
        err = capsys.readouterr().err
        assert (f"pulling: fuse.noflock at {noflock_mount} refuses flock (No locks available); locking with "
                f"{lock}.held instead") in err
        assert f"waiting for {held}, held by pid {holder.pid} on {HOST}" in err
    finally:
        holder.send_signal(signal.SIGKILL)  # the lock file stays: a stale holder of this host
        holder.wait()
    assert held.exists()
    with exclusive_lock(lock, 5, "pulling"):
        assert Holder.parse(held.read_text()).pid == os.getpid()  # type: ignore[union-attr]
    assert f"removing the stale lock {held} of pid {holder.pid} on {HOST}" in capsys.readouterr().err
    assert not held.exists()


def test_a_holder_on_another_host_is_named_with_the_file_to_remove(noflock_mount: Path) -> None:
    held = noflock_mount / "other.lock.held"
    held.write_text("node17 4242 123456\n")
    with pytest.raises(LockTimeout, match=rf"{held} is still held by pid 4242 on node17 after 1 s; if that process "
                                          rf"has gone, remove {held}"):
        with exclusive_lock(noflock_mount / "other.lock", 1, "pulling"):
            pass
    assert held.read_text() == "node17 4242 123456\n"
    held.unlink()


def test_the_held_file_excludes_concurrent_processes(noflock_mount: Path) -> None:
    counter, lock = noflock_mount / "counter", noflock_mount / "count.lock"
    counter.write_text("0")
    code = COUNT.format(src=str(REPO / "src"), counter=str(counter), path=str(lock))
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert counter.read_text() == "40"
    assert not (noflock_mount / "count.lock.held").exists()
