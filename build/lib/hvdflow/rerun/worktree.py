"""The recorded code revision, checked out as a git worktree of the repository the record was made in.

A record made from a tree with uncommitted changes names the commit and the sha256 of ``git diff HEAD --binary``. If
the repository still holds exactly that difference, it is applied to the worktree, so the rerun runs the recorded
code; otherwise the rerun is refused, unless the user accepts the clean commit (``allow_dirty``).
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.errors import RerunRefused


@dataclass(frozen=True)
class Checkout:
    """The worktree a rerun runs in and how its code relates to the record's."""

    root: Path
    commit: str
    diff_applied: bool
    """The recorded uncommitted difference was applied on top of the commit."""
    note: Optional[str]
    """Why the code may differ from the record's (the user accepted a dirty or unknown revision), or None."""


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check)


def repository_of(directory: Path, commit: Optional[str] = None) -> Path:
    """The top of the git checkout holding ``directory`` (where the run's tree should be, for the recorded
    ``commit``); RerunRefused naming what it looked for and ``--repo`` if there is none."""
    proc = _git(directory, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        wanted = f"the checkout the run was made in, which holds commit {commit}" if commit else "the run's checkout"
        raise RerunRefused(f"{directory} is not in a git checkout: looked there for {wanted} (two folders above "
                           f"results/<experiment>/run.json); pass --repo with a clone of hvdflow that has "
                           f"{'that commit' if commit else 'the recorded commit'} ({proc.stderr.strip()})")
    return Path(proc.stdout.strip())


def _uncommitted_diff(repo: Path) -> bytes:
    """``git diff HEAD --binary`` of ``repo``, as the run record hashes it."""
    return subprocess.run(["git", "-C", str(repo), "diff", "HEAD", "--binary", "--diff-filter=ACMRT"],
                          capture_output=True, check=True).stdout


def check_out(code: Mapping[str, Any], repo: Path, into: Path, allow_dirty: bool) -> Checkout:
    """A worktree of ``repo`` at the record's ``code`` revision in ``into`` (which must not exist).

    Refused, naming the reason: an unknown revision, a commit ``repo`` does not have, or a dirty record whose
    difference ``repo`` no longer holds; ``allow_dirty`` accepts the last two cases at the clean commit (or, for an
    unknown revision, at ``repo``'s HEAD) and says so in ``Checkout.note``.
    """
    if into.exists():
        raise RerunRefused(f"{into} already exists: pass --into with a new directory")
    commit, note, patch = code.get("commit"), None, None
    if commit is None:
        if not allow_dirty:
            raise RerunRefused("the record names no code revision (the run was not made from a git checkout): "
                               "pass --allow-dirty to rerun with the code at the HEAD of --repo")
        commit = _git(repo, "rev-parse", "HEAD").stdout.strip()
        note = f"the record names no revision; ran {commit} (HEAD of {repo})"
    elif _git(repo, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        raise RerunRefused(f"commit {commit} of the record is not in {repo}: fetch it, or pass --repo with a clone "
                           "that has it")
    if code.get("dirty"):
        diff = _uncommitted_diff(repo) if _head(repo) == commit else b""
        if diff and hashlib.sha256(diff).hexdigest() == code.get("diff_sha256"):
            patch = diff
        elif not allow_dirty:
            raise RerunRefused(
                f"the run was made from {commit} with uncommitted changes (diff sha256 {code.get('diff_sha256')}, "
                f"files {', '.join(code.get('changed_files') or [])}) that {repo} no longer holds: the recorded code "
                "is not available. Pass --allow-dirty to rerun the clean commit")
        else:
            note = f"the record's uncommitted changes ({', '.join(code.get('changed_files') or [])}) are not in this rerun"
    into.parent.mkdir(parents=True, exist_ok=True)
    added = _git(repo, "worktree", "add", "--detach", str(into), commit, check=False)
    if added.returncode != 0:
        raise RerunRefused(f"git worktree add {into} {commit} failed: {added.stderr.strip()}")
    if patch is not None:
        applied = subprocess.run(["git", "-C", str(into), "apply", "--index", "--binary", "-"], input=patch, capture_output=True)
        if applied.returncode != 0:
            remove(repo, into)
            raise RerunRefused(f"the record's uncommitted changes do not apply to {commit} in {into}: "
                               f"{applied.stderr.decode(errors='replace').strip()}")
    return Checkout(root=into, commit=commit, diff_applied=patch is not None, note=note)


def remove(repo: Path, into: Path) -> None:
    """Remove the worktree ``into`` of ``repo`` (a rerun refused before it ran): its folder and git's record of it."""
    _git(repo, "worktree", "remove", "--force", str(into), check=False)
    _git(repo, "worktree", "prune", check=False)


def _head(repo: Path) -> str:
    return _git(repo, "rev-parse", "HEAD").stdout.strip()
