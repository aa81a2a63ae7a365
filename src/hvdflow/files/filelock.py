"""An exclusive file lock with a timeout, which says who holds it while waiting."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hvdflow.errors import HvdflowError


class LockTimeout(HvdflowError):
    """The lock stayed held by another process for longer than allowed."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        return "an unknown process"
    return f"pid {text}" if text else "an unknown process"


@contextmanager
def exclusive_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the ``with`` block.

    Waits up to ``timeout`` seconds, telling stderr once which process holds the lock; raises LockTimeout after that.
    The lock dies with its process, so a crashed holder never blocks the next one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(f"{what}: {path} is still held by {_holder(path)} after {timeout:.0f} s") from None
                if not told:
                    print(f"hvdflow: {what}: waiting for {path}, held by {_holder(path)}", file=sys.stderr, flush=True)
                    told = True
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
