"""An exclusive file lock with a timeout, which says who holds it (host and pid) while waiting.

``flock`` where the filesystem has it: the lock dies with its process, so a crashed holder never blocks the next one.
Where the filesystem refuses ``flock`` (NFS without a lock manager and Lustre mounted without ``flock`` answer
ENOLCK or ENOSYS), the lock is a file ``<path>.held`` created with ``O_EXCL`` (atomic on NFS since v3 and on Lustre)
that holds its holder's host, pid and process start time. A holder on this host that has gone (no such process, or
another process with its pid) is stale: its file is removed under a lock on this host's own /tmp, and only if it still
holds that same holder, so two processes that both found it stale never remove each other's fresh lock. A holder on
another host cannot be checked from here: the waiter times out naming it, and the file to remove if it has gone.

Not the ``filelock`` package: its flock lock falls back to a lock file only on ENOSYS (not on NFS's ENOLCK), its
waiting says nothing of the holder, and its soft lock's stale-lock break admitted two holders on a reused inode
(GHSA-fq56-3cx3-fjxp); the break here compares the holder's identity instead.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

from hvdflow.errors import HvdflowError
from hvdflow.files.private import private_dir

NO_FLOCK = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)
"""What ``flock`` answers on a filesystem that does not lock: NFS without lockd, Lustre without ``-o flock``."""

POLL = 0.2


class LockTimeout(HvdflowError):
    """The lock stayed held by another process for longer than allowed."""


class Holder(NamedTuple):
    """Who holds a lock: host, pid, and the process's start time (clock ticks after boot; 0 where unknown)."""

    host: str
    pid: int
    started: int

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def line(self) -> str:
        """The holder as its lock file stores it."""
        return f"{self.host} {self.pid} {self.started}\n"

    @classmethod
    def parse(cls, text: str) -> Optional["Holder"]:
        """The holder a lock file names, or None where it names none (being written, or empty)."""
        parts = text.split()
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        return cls(parts[0], int(parts[1]), int(parts[2]))

    def gone(self) -> bool:
        """Whether this holder is a process of this host that no longer runs (its pid free, or reused)."""
        return self.host == socket.gethostname() and _start_time(self.pid) != self.started


def _start_time(pid: int) -> int:
    """Process ``pid``'s start time in clock ticks after boot (/proc), or -1 where there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])


def me() -> Holder:
    """This process as a lock's holder."""
    return Holder(socket.gethostname(), os.getpid(), _start_time(os.getpid()))


def filesystem_of(path: Path) -> str:
    """The type and mount point of the filesystem ``path`` is on (``nfs4 at /home``), from /proc/self/mountinfo."""
    target, best = os.path.realpath(path), ("", "an unknown filesystem")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best[1]
    for line in lines:
        fields, _, rest = line.partition(" - ")
        mount = fields.split()[4].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[0]):
            best = (mount, f"{rest.split()[0]} at {mount}")
    return best[1]


def _read_holder(path: Path) -> Optional[Holder]:
    try:
        return Holder.parse(path.read_text())
    except OSError:
        return None


def _describe(holder: Optional[Holder]) -> str:
    return str(holder) if holder else "an unknown process"


@contextmanager
def exclusive_lock(path: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the ``with`` block.

    Waits up to ``timeout`` seconds, telling stderr once which process (host and pid) holds the lock; raises
    LockTimeout after that. ``flock`` where the filesystem has it, else a ``<path>.held`` lock file (module doc).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    refused: Optional[str] = None
    try:
        _flock(fd, path, timeout, what)
    except OSError as exc:
        if exc.errno not in NO_FLOCK:
            os.close(fd)
            raise
        refused = exc.strerror
    except BaseException:  # the timeout, an interrupt
        os.close(fd)
        raise
    if refused is not None:
        os.close(fd)
        print(f"hvdflow: {what}: {filesystem_of(path)} refuses flock ({refused}); locking with {path}.held "
              f"instead", file=sys.stderr, flush=True)
        with held_file(path.with_name(path.name + ".held"), timeout, what):
            yield
        return
    try:
        yield
    finally:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _flock(fd: int, path: Path, timeout: float, what: str) -> None:
    """Take ``flock`` on ``fd`` within ``timeout`` and write this process into ``path``; OSError where the filesystem
    refuses flock."""
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = _describe(_read_holder(path))
            if time.monotonic() >= deadline:
                raise LockTimeout(f"{what}: {path} is still held by {holder} after {timeout:.0f} s") from None
            if not told:
                print(f"hvdflow: {what}: waiting for {path}, held by {holder}", file=sys.stderr, flush=True)
                told = True
            time.sleep(POLL)
    os.ftruncate(fd, 0)
    os.pwrite(fd, me().line().encode(), 0)


@contextmanager
def held_file(held: Path, timeout: float, what: str) -> Iterator[None]:
    """Hold the lock whose token is the file ``held``, created with O_EXCL and naming this process (module doc)."""
    mine = me()
    deadline = time.monotonic() + timeout
    told = False
    while True:
        try:
            fd = os.open(held, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            holder = _read_holder(held)
            if holder is not None and holder.gone():
                _break_stale(held, holder)
                continue
            if time.monotonic() >= deadline:
                raise LockTimeout(f"{what}: {held} is still held by {_describe(holder)} after {timeout:.0f} s; "
                                  f"if that process has gone, remove {held}") from None
            if not told:
                print(f"hvdflow: {what}: waiting for {held}, held by {_describe(holder)}", file=sys.stderr,
                      flush=True)
                told = True
            time.sleep(POLL)
            continue
        try:
            os.write(fd, mine.line().encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        break
    try:
        yield
    finally:
        if _read_holder(held) == mine:
            held.unlink()


def _break_stale(held: Path, stale: Holder) -> None:
    """Remove ``held`` if it still names the gone holder ``stale``, under a lock of this host (every process that can
    judge ``stale`` gone runs here, so they take turns and none removes a lock taken after the stale one)."""
    side = private_dir(Path(tempfile.gettempdir()) / f"hvdflow-{os.getuid()}-locks", "keep lock files")
    key = hashlib.sha256(str(held.resolve()).encode()).hexdigest()[:32]
    fd = os.open(side / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _read_holder(held) == stale:
            print(f"hvdflow: removing the stale lock {held} of {stale}, which has gone", file=sys.stderr, flush=True)
            held.unlink(missing_ok=True)
    finally:
        os.close(fd)
