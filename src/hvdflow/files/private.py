"""Folders only this user can use, made and checked in places other users share (node scratch, /tmp, /dev/shm).

A path another user could have prepared (a symbolic link to the victim's files, a folder they own or can write) is
refused by name, never followed: the folder is created with mode 0700 by ``mkdir`` (which never follows a link at
its own name), then opened with ``O_NOFOLLOW`` and checked on the open descriptor. Everything below a checked
private folder is this user's alone: nobody else can create, replace or read anything in it.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from hvdflow.errors import HvdflowError

RANKS_TMPDIR = "give the ranks a TMPDIR"
"""What the ranks' private ``TMPDIR`` is for, as a refusal to use it names it (local and Slurm launches alike)."""


class UnsafePlace(HvdflowError):
    """A path in a shared place is a link, belongs to another user, or is writable by others: hvdflow will not use it."""


def _check(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.getuid():
        raise UnsafePlace(f"{path} belongs to uid {st.st_uid}: refusing to {what} there")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePlace(f"{path} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}): refusing to {what} there; remove it or "
                          f"`chmod go-w` it")


def _open_dir(path: Path, what: str) -> int:
    """``path`` opened as a directory without following a link at its name; UnsafePlace naming what it is instead."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        try:
            st = os.lstat(path)
        except OSError:
            raise UnsafePlace(f"{path}: {exc.strerror}: refusing to {what} there") from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise UnsafePlace(f"{path} is {kind} (owned by uid {st.st_uid}): refusing to {what} there") from None
        if st.st_uid != os.getuid():  # another user's folder we may not even open
            raise UnsafePlace(f"{path} belongs to uid {st.st_uid}: refusing to {what} there") from None
        raise UnsafePlace(f"{path}: {exc.strerror}: refusing to {what} there") from None


def in_shared_place(path: Path) -> bool:
    """Whether ``path``'s folder is one every user can write in (/tmp, a scratch file system), so that ``path`` may
    have been prepared by another user."""
    try:
        return bool(os.stat(path.parent).st_mode & stat.S_IWOTH)
    except FileNotFoundError:
        return False


def private_dir(path: Path, what: str) -> Path:
    """Make ``path`` a directory that only this user can enter (0700), or check the one that is there; return it.

    ``what`` says what the folder is for in the refusal (``stage``, ``write rank files``). The parent must exist. An
    existing folder of this user that others may read (not write) is closed to them; anything else is UnsafePlace.
    OSError where the folder cannot be made (the parent is not writable).
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = _open_dir(path, what)
    try:
        st = os.fstat(fd)
        _check(path, st, what)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def check_private(path: Path, what: str) -> bool:
    """Whether ``path`` is this user's private folder (False where there is none); UnsafePlace if something else is
    there (a link, another user's folder, one others can write)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    fd = _open_dir(path, what)
    try:
        _check(path, os.fstat(fd), what)
        return True
    finally:
        os.close(fd)


def remove_own(path: Path) -> bool:
    """Remove ``path`` if it is this user's: a folder's whole tree (links inside are removed, never followed), or a
    link or file of this user's; return whether anything was removed. Another user's entry stays."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if st.st_uid != os.getuid():
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)  # fd-based: a link in the tree is unlinked, not followed
    else:
        path.unlink(missing_ok=True)
    return not os.path.lexists(path)


def existing_parent(path: Path) -> Path:
    """``path``, or its nearest folder that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
