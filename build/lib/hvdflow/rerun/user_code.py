"""A user's own code in a rerun (a model, a training script, a dataset's reader): the recorded files put back into
the worktree, each checked against the record's sha256.

A folder inside the checkout comes back with the recorded commit (and the recorded uncommitted changes); a folder
git does not hold (untracked, or outside the checkout) is copied from the run's working directory, and only if every
recorded file is there with the recorded sha256: a file that changed since the run is refused by name. Either way
the worktree's folder must end up holding the recorded bytes, file by file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.errors import RerunRefused
from hvdflow.files.cache import sha256_file

RECORDED_CODE = {"user_code": "model code", "reader_code": "reader code"}
"""The run record's keys that hold user code (:func:`hvdflow.pipeline.record._code_as_it_ran`), and what each is."""


def _differing(folder: Path, files: Mapping[str, str], what: str) -> Optional[str]:
    """The first recorded file that ``folder`` lacks or holds with other bytes, in words; None if all match."""
    for name, recorded in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            return f"{path}: a file of the recorded {what} is missing"
        actual = sha256_file(path)
        if actual != recorded:
            return f"{path}: sha256 {actual}, but the record says {recorded}"
    return None


def restore_user_code(record: Mapping[str, Any], workdir: Path, into: Path) -> list[str]:
    """Put each recorded folder of user code (:data:`RECORDED_CODE`) into the worktree ``into`` (the run ran in
    ``workdir``); how, in words, one line each (none for a run of hvdflow's own models and sources). RerunRefused
    naming the first file that differs from the record."""
    return [f"{what}: {_restore(record[key], workdir, into, what)}" for key, what in RECORDED_CODE.items()
            if record.get(key)]


def _restore(code: Mapping[str, Any], workdir: Path, into: Path, what: str) -> str:
    """One recorded folder put back (:func:`restore_user_code`); how, in words."""
    folder, files = Path(code["folder"]), code["files"]
    if folder.is_absolute():  # outside every tree: used where it is, if it is as recorded
        differs = _differing(folder, files, what)
        if differs:
            raise RerunRefused(f"{differs}: the {what} changed since the run")
        return f"{folder}, outside the checkout, sha256 checked"
    target = into / folder
    if _differing(target, files, what) is None:
        return f"{folder} from the recorded commit, sha256 checked"
    source = workdir / folder
    differs = _differing(source, files, what)
    if differs:
        raise RerunRefused(f"{differs}: the {what} changed since the run, and git does not hold the recorded "
                           f"version (commit it with the next run, or restore the file)")
    for name in files:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target / name)
    return f"{folder} copied from {workdir}, sha256 checked"
