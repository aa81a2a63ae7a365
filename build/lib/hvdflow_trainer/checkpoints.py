"""The manifest of a run's checkpoints and the decision where to resume, whatever framework writes the files.

A framework saves its state as files named ``<name>.*`` in the run's folder (:mod:`.keras.checkpoints`:
TensorFlow's ``ckpt-<global step>``); what it does not hold (the position in the epoch, the history so far, the
running metric sums of an epoch stopped half-way) goes into the manifest entry, which :mod:`hvdflow_runstate` writes
after the files, last and atomically, with every file's sha256. Every rank resumes from the same entry: the newest
sound checkpoint of the same run.

When the ranks' states differ (neighbour averaging: each rank has its own weights and momentum), every rank saves its
own: rank r > 0 into ``rank-<r>/`` beside rank 0's files, all under the same name; rank 0's manifest entry then names
every rank's files with their sha256, so a checkpoint is sound only when all of them are.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

from hvdflow_runstate import (
    MANIFEST,
    CheckpointError,
    durable_write_json,
    identity_differences,
    new_manifest,
    newest_sound_checkpoint,
    position,
    read_manifest,
    sha256_file,
)


class CheckpointManifest:
    """The manifest of one run's checkpoints in ``folder`` as this rank sees it; it keeps the last ``keep``."""

    def __init__(self, folder: str, identity: Dict[str, object], keep: int, rank: int = 0, size: int = 1,
                 per_rank: bool = False) -> None:
        """``per_rank``: every rank saves its own state (see the module's docstring)."""
        self.folder, self.identity, self.keep = folder, identity, keep
        self.rank, self.size, self.per_rank = rank, size, per_rank
        self.manifest = new_manifest(identity)

    def rank_folder(self, rank: int) -> str:
        """Where ``rank``'s files go, relative to the run's folder: rank 0's (or the only) state at the top."""
        return "rank-%d" % rank if self.per_rank and rank > 0 else ""

    def own_files(self, name: str) -> str:
        """The path prefix of this rank's files of the checkpoint ``name``."""
        return os.path.join(self.folder, self.rank_folder(self.rank), name)

    def follow(self, rank: int, size: int) -> None:
        """This process is now ``rank`` of ``size`` (an elastic run changed them); the new rank 0 reads the manifest
        that the old one last wrote, so that its next save keeps the run's list of checkpoints."""
        if rank == 0 and self.rank != 0:
            self.manifest = read_manifest(self.folder) or self.manifest
        self.rank, self.size = rank, size

    def resume_entry(self) -> Optional[Dict[str, object]]:
        """The manifest entry of the newest sound checkpoint of this run, or None to start from scratch; the
        manifest kept from here on ends with it.

        CheckpointError if the folder holds another run's checkpoints, or names checkpoints of which none is sound.
        """
        manifest = read_manifest(self.folder)
        if manifest is None or manifest.get("finished"):
            return None
        changes = identity_differences(manifest["identity"], self.identity)  # type: ignore[arg-type]
        if changes:
            raise CheckpointError("%s holds checkpoints of another run: %s" % (self.folder, "; ".join(changes)))
        entry, warnings = newest_sound_checkpoint(self.folder, manifest)
        for warning in warnings:
            print("hvdflow: warning: %s; falling back to an older one" % warning, flush=True)
        if entry is None:
            if manifest["checkpoints"]:
                raise CheckpointError("%s: none of the checkpoints its manifest names is sound: %s"
                                      % (self.folder, "; ".join(warnings)))
            return None
        kept: List[Dict[str, object]] = []
        for candidate in manifest["checkpoints"]:  # type: ignore[union-attr]
            kept.append(candidate)
            if candidate["name"] == entry["name"]:
                break
        manifest["checkpoints"] = kept
        self.manifest = manifest
        return entry

    def record(self, name: str, epoch: int, step: int, steps_per_epoch: int, state: Dict[str, object], reason: str,
               started: float) -> Dict[str, object]:
        """Name the files of checkpoint ``name`` (every rank's, written) in a new manifest entry and write the
        manifest (rank 0 only); the entry. ``started``: ``time.perf_counter()`` when the save began."""
        files = {}
        for rank in range(self.size if self.per_rank else 1):
            sub = self.rank_folder(rank)
            for f in sorted(os.listdir(os.path.join(self.folder, sub))):
                if f.startswith(name + "."):
                    files[os.path.join(sub, f)] = sha256_file(os.path.join(self.folder, sub, f))
        entry = {"name": name, "epoch": epoch, "step": step, "global_step": epoch * steps_per_epoch + step,
                 "files": files, "state": state, "reason": reason, "unix": time.time()}
        entry["bytes"] = sum(os.path.getsize(os.path.join(self.folder, f)) for f in files)
        entry["seconds"] = round(time.perf_counter() - started, 4)
        checkpoints = list(self.manifest["checkpoints"]) + [entry]  # type: ignore[call-overload]
        self.manifest["checkpoints"] = checkpoints[-self.keep:]
        durable_write_json(os.path.join(self.folder, MANIFEST), self.manifest)
        print("hvdflow: checkpoint %s saved at %s (%s), %d bytes in %.2f s"
              % (name, position(entry), reason, entry["bytes"], entry["seconds"]), flush=True)
        return entry

    def finish(self) -> None:
        """Mark the run finished in the manifest: its checkpoints are kept, but no later attempt resumes from them."""
        self.manifest["finished"] = True
        durable_write_json(os.path.join(self.folder, MANIFEST), self.manifest)
