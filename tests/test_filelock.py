"""The pull lock: exclusive, names its holder, times out with a message."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hvdflow.files.filelock import LockTimeout, exclusive_lock

HOLD = """
import sys, time
sys.path.insert(0, {src!r})
from pathlib import Path
from hvdflow.files.filelock import exclusive_lock
with exclusive_lock(Path({path!r}), 5, "test"):
    print("held", flush=True)
    time.sleep({seconds})
"""


def _holder(path: Path, seconds: float) -> subprocess.Popen[str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(src=src, path=str(path), seconds=seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_timeout_names_the_holder_pid(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    holder = _holder(lock, 10)
    try:
        with pytest.raises(LockTimeout, match=rf"pulling: {lock} is still held by pid {holder.pid} after 1 s"):
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
    assert f"waiting for {lock}, held by pid {holder.pid}" in capsys.readouterr().err


def test_lock_of_a_dead_process_is_free(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    holder = _holder(lock, 30)
    holder.kill()
    holder.wait()
    with exclusive_lock(lock, 1, "pulling"):
        assert lock.read_text() == str(__import__("os").getpid())
