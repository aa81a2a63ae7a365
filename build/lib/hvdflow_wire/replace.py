"""Replacing a file so that a reader sees the old content or the whole new one, never a half-written file, through a
temporary file nobody else can have prepared: an unpredictable name beside the file, created with ``O_EXCL`` (so
never a link or a file another user left at a predictable name), given the mode a plain ``open`` would give it, and
removed if the writing fails. Every writer of hvdflow's files, on both sides of the seam, goes through here."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from typing import IO, Any, Iterator, Optional


def _umask() -> int:
    """This process's umask, read without changing it (``os.umask`` would, for a moment, in every thread)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


@contextmanager
def replaced(path: str, mode: str = "w", durable: bool = False, newline: Optional[str] = None) -> Iterator[IO[Any]]:
    """A file opened for writing (``mode``) whose content replaces ``path`` when the ``with`` block ends without an
    error; ``durable``: flushed to disk, then the rename too (fsync of the folder), so a crash keeps one or the other.
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".%s." % os.path.basename(path), suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, newline=newline) as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
