"""The recorded run's prepared dataset: found, checked against the record's sha256, and placed in the rerun.

The record names every input file (the dataset's ``index.json`` and its shards) by its path relative to the run's
working directory, with its sha256. A rerun takes them from that directory after checking each one, so a dataset
that took hours to prepare is not prepared again and a changed shard is found before any training; where the
working directory no longer has them, the rerun prepares the dataset afresh and checks the result the same way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Mapping, Optional

from hvdflow.errors import RerunRefused
from hvdflow.files.cache import sha256_file
from hvdflow_index import INDEX, content_sha256


def present(inputs: Mapping[str, str], source: Path) -> bool:
    """Whether ``source`` holds the recorded inputs: all of them (True) or none (False); RerunRefused naming the
    first missing file if only some are there."""
    found = [name for name in sorted(inputs) if (source / name).is_file()]
    if not found:
        return False
    missing = [name for name in sorted(inputs) if name not in found]
    if missing:
        raise RerunRefused(f"{source / missing[0]}: an input of the recorded run is missing ({len(missing)} of "
                           f"{len(inputs)} files are), while {found[0]} is there: the prepared dataset is incomplete")
    return True


def verify(inputs: Mapping[str, str], source: Path, index_content: Optional[str] = None) -> None:
    """Check every recorded input under ``source`` against its sha256; RerunRefused naming the first that differs.

    With ``index_content`` (the record's ``dataset_index_content_sha256``), an ``index.json`` is checked by its
    content less the preparation's timings instead: a dataset prepared afresh has the same shards and content but
    other timings.
    """
    for name in sorted(inputs):
        path = source / name
        if not path.is_file():
            raise RerunRefused(f"{path}: an input of the recorded run is missing")
        actual = sha256_file(path)
        if actual == inputs[name]:
            continue
        if index_content is not None and path.name == INDEX:
            content = content_sha256(json.loads(path.read_text()))
            if content == index_content:
                continue
            raise RerunRefused(f"{path}: content sha256 {content}, but the record says {index_content}: the dataset "
                               "prepared afresh differs from the recorded run's")
        raise RerunRefused(f"{path}: sha256 {actual}, but the record says {inputs[name]}: the input changed "
                           "since the recorded run, which therefore cannot be reproduced from it")


def place(inputs: Mapping[str, str], source: Path, root: Path) -> None:
    """Copy the (verified) inputs from ``source`` to the same paths under ``root``, the index last, so that each
    copy is newer than what Snakemake made before it and the preparation is not run again."""
    names = sorted(inputs, key=lambda name: (Path(name).name == INDEX, name))
    for name in names:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)
