"""A training run's state between its attempts, shared by both sides of the seam: the checkpoint manifest.

Rank 0 of the trainer writes full-state checkpoints with TensorFlow (``ckpt-<step>.index`` and ``.data-*`` files in
the run's checkpoint folder); this module owns the small JSON manifest written after them, last and atomically
(temporary name, fsync, rename, fsync of the folder), which names the complete checkpoints with the sha256 of every
file, the training position (epoch and step) and the run's identity. Nothing trusts a checkpoint file the manifest
does not name. The host reads the manifest before a launch (resume, refuse or start over) and for the run record;
the trainer writes it and restores from the newest sound entry.

Standard library only (and :mod:`hvdflow_index`'s hashing), Python 3.8 grammar; imports neither ``hvdflow`` nor
``hvdflow_trainer``.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, List, Optional, Tuple

from hvdflow_index import sha256_file
from hvdflow_wire.replace import replaced

FORMAT = "hvdflow-checkpoints-v1"
MANIFEST = "manifest.json"
STOPPED_EXIT = 75
"""The status every rank exits with after the ranks agreed to stop on a signal and rank 0 saved a checkpoint
(EX_TEMPFAIL: try again later, and the run resumes)."""
STOPPED_LINE_END = "; exiting with status %d to be resumed" % STOPPED_EXIT
"""How rank 0's last line ends once every rank met it after the checkpoint of a stop (``hvdflow: <why>`` before it):
the host reads a stop from it even when Slurm killed ranks that were still exiting."""


class CheckpointError(Exception):
    """A checkpoint folder cannot be used: its manifest is unreadable, or no checkpoint it names is sound."""


def durable_write_json(path: str, data: object) -> None:
    """Write ``data`` as JSON so that ``path`` holds either the old or the whole new content after any crash.

    A temporary file beside it, fsync, rename over ``path``, then fsync of the folder so the rename itself is on disk.
    """
    with replaced(path, durable=True) as handle:
        json.dump(data, handle, indent=2, sort_keys=True)


def config_sha256(experiment: Dict[str, object]) -> str:
    """sha256 of a resolved experiment config, as canonical JSON."""
    return hashlib.sha256(json.dumps(experiment, sort_keys=True).encode()).hexdigest()


def run_identity(experiment: Dict[str, object], image_digest: str, dataset_index_sha256: str) -> Dict[str, object]:
    """What makes two attempts the same run: the resolved experiment, the image digest and the dataset's index."""
    return {"experiment": experiment, "config_sha256": config_sha256(experiment), "image_digest": image_digest,
            "dataset_index_sha256": dataset_index_sha256}


def identity_differences(old: Dict[str, object], new: Dict[str, object]) -> List[str]:
    """What changed between two run identities, one line each (config keys, image digest, dataset); empty if none."""
    changes = []
    old_exp = old.get("experiment") or {}
    new_exp = new.get("experiment") or {}
    for key in sorted(set(old_exp) | set(new_exp)):  # type: ignore[arg-type]
        before, after = old_exp.get(key, "(unset)"), new_exp.get(key, "(unset)")  # type: ignore[union-attr]
        if before != after:
            changes.append("experiment key %s: %s -> %s" % (key, json.dumps(before), json.dumps(after)))
    if old.get("image_digest") != new.get("image_digest"):
        changes.append("image digest: %s -> %s" % (old.get("image_digest"), new.get("image_digest")))
    if old.get("dataset_index_sha256") != new.get("dataset_index_sha256"):
        changes.append("dataset index sha256: %s -> %s" % (old.get("dataset_index_sha256"),
                                                            new.get("dataset_index_sha256")))
    return changes


def read_manifest(folder: str) -> Optional[Dict[str, object]]:
    """The manifest of a checkpoint folder, None where there is none; CheckpointError if it is unreadable."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise CheckpointError("%s is not valid JSON (%s): move the folder aside to start over" % (path, exc)) from None
    if manifest.get("format") != FORMAT:
        raise CheckpointError("%s has format %r, expected %r" % (path, manifest.get("format"), FORMAT))
    return manifest


def new_manifest(identity: Dict[str, object]) -> Dict[str, object]:
    """The manifest of a run that has no checkpoint yet."""
    return {"format": FORMAT, "identity": identity, "checkpoints": [], "finished": False}


def checkpoint_is_sound(folder: str, entry: Dict[str, object]) -> Optional[str]:
    """None if every file of ``entry`` is there with its recorded sha256, else what is wrong."""
    for name, digest in sorted(entry["files"].items()):  # type: ignore[union-attr]
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            return "%s is missing" % name
        if sha256_file(path) != digest:
            return "%s does not match its sha256" % name
    return None


def newest_sound_checkpoint(folder: str, manifest: Dict[str, object]) -> Tuple[Optional[Dict[str, object]], List[str]]:
    """The newest checkpoint of ``manifest`` whose files are sound, and a warning for each newer one that is not."""
    warnings = []
    for entry in reversed(manifest["checkpoints"]):  # type: ignore[call-overload]
        problem = checkpoint_is_sound(folder, entry)
        if problem is None:
            return entry, warnings
        warnings.append("checkpoint %s (epoch %d, step %d) is not sound: %s" % (entry["name"], entry["epoch"],
                                                                               entry["step"], problem))
    return None, warnings


def position(entry: Optional[Dict[str, object]]) -> str:
    """Where a checkpoint leaves training, in words: ``epoch 3 step 12`` (steps done in the epoch after 3 done)."""
    if entry is None:
        return "the start"
    return "epoch %d step %d" % (entry["epoch"], entry["step"])
