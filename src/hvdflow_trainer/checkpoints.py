"""Full-state checkpoints of a training run with TensorFlow's own machinery, named by the run's manifest.

``tf.train.Checkpoint`` holds the model's weights (BatchNorm statistics included) and the optimizer's variables:
its iteration count, its slots and the hyper variables (learning rate, momentum) that Horovod's warm-up changes.
``tf.train.CheckpointManager`` writes ``ckpt-<global step>`` and keeps the last few. What Keras does not hold (the
position in the epoch, the history so far, the running metric sums of an epoch stopped half-way) goes into the
manifest entry, which :mod:`hvdflow_runstate` writes after the files, last and atomically. Rank 0 saves; every rank
restores the same checkpoint, so all of them continue from identical state.

When the ranks' states differ (neighbour averaging: each rank has its own weights and momentum), every rank saves its
own: rank r > 0 into ``rank-<r>/`` beside rank 0's files, all under the same name; the ranks meet, and rank 0's
manifest entry then names every rank's files with their sha256, so a checkpoint is sound only when all of them are.
Each rank restores its own files of the entry rank 0 picked.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional

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


class RunCheckpoints:
    """The checkpoints of one run in ``folder``: restore the newest sound one, save new ones, keep the last ``keep``."""

    def __init__(self, folder: str, identity: Dict[str, object], keep: int, model, optimizer,  # type: ignore[no-untyped-def]
                 rank: int = 0, size: int = 1, barrier: Optional[Callable[[], None]] = None) -> None:
        """``barrier`` (all ranks call it) given: every rank saves its own state (see the module's docstring)."""
        import tensorflow as tf

        self.folder, self.identity, self.keep = folder, identity, keep
        self.model, self.optimizer = model, optimizer
        self.rank, self.size, self.barrier = rank, size, barrier
        # the optimizer's variables exist before a restore or a save, without a training step (which would change
        # the iteration count and the weights)
        optimizer._create_all_weights(model.trainable_variables)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(self.checkpoint, os.path.join(folder, self.rank_folder(rank)),
                                                  max_to_keep=keep, checkpoint_name="ckpt")
        self.manifest = new_manifest(identity)

    def rank_folder(self, rank: int) -> str:
        """Where ``rank``'s files go, relative to the run's folder: rank 0's (or the only) state at the top."""
        return "rank-%d" % rank if self.barrier is not None and rank > 0 else ""

    def follow(self, rank: int, size: int) -> None:
        """This process is now ``rank`` of ``size`` (an elastic run changed them); the new rank 0 reads the manifest
        that the old one last wrote, so that its next save keeps the run's list of checkpoints."""
        if rank == 0 and self.rank != 0:
            self.manifest = read_manifest(self.folder) or self.manifest
        self.rank, self.size = rank, size

    def restore(self) -> Optional[Dict[str, object]]:
        """Restore the newest sound checkpoint of this run; its manifest entry, or None to start from scratch.

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
        own = os.path.join(self.folder, self.rank_folder(self.rank), str(entry["name"]))
        self.checkpoint.restore(own).assert_existing_objects_matched()
        kept: List[Dict[str, object]] = []
        for candidate in manifest["checkpoints"]:  # type: ignore[union-attr]
            kept.append(candidate)
            if candidate["name"] == entry["name"]:
                break
        manifest["checkpoints"] = kept
        self.manifest = manifest
        return entry

    def save(self, epoch: int, step: int, steps_per_epoch: int, state: Dict[str, object], reason: str
             ) -> Optional[Dict[str, object]]:
        """Write a checkpoint after ``epoch`` epochs and ``step`` more steps, then the manifest naming it.

        Every rank calls it; rank 0 writes (and returns) the manifest entry, the others write their own state or
        nothing, and return None.
        """
        if self.barrier is None and self.rank != 0:
            return None
        started = time.perf_counter()
        prefix = self.manager.save(checkpoint_number=epoch * steps_per_epoch + step)
        name = os.path.basename(prefix)
        if self.barrier is not None:
            self.barrier()  # every rank's files are written before rank 0 hashes them and writes the manifest
        if self.rank != 0:
            return None
        files = {}
        for rank in range(self.size if self.barrier is not None else 1):
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
