"""Full-state checkpoints of a training run with TensorFlow's own machinery, named by the run's manifest.

``tf.train.Checkpoint`` holds the model's weights (BatchNorm statistics included) and the optimizer's variables:
its iteration count, its slots and the hyper variables (learning rate, momentum) that Horovod's warm-up changes.
``tf.train.CheckpointManager`` writes ``ckpt-<global step>`` and keeps the last few. The manifest and the decision
where to resume are the framework's neutral part (:class:`~hvdflow_trainer.checkpoints.CheckpointManifest`). Rank 0
saves; every rank restores the same checkpoint, so all of them continue from identical state. When the ranks' states
differ (neighbour averaging), every rank saves its own files; the ranks meet before rank 0 writes the manifest, and
each rank restores its own files of the entry rank 0 picked.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, Optional

import tensorflow as tf

from ..checkpoints import CheckpointManifest


class RunCheckpoints:
    """The checkpoints of one run in ``folder``: restore the newest sound one, save new ones, keep the last ``keep``."""

    def __init__(self, folder: str, identity: Dict[str, object], keep: int, model, optimizer,  # type: ignore[no-untyped-def]
                 rank: int = 0, size: int = 1, barrier: Optional[Callable[[], None]] = None) -> None:
        """``barrier`` (all ranks call it) given: every rank saves its own state (see the module's docstring)."""
        self.manifest = CheckpointManifest(folder, identity, keep, rank, size, per_rank=barrier is not None)
        self.barrier = barrier
        # the optimizer's variables exist before a restore or a save, without a training step (which would change
        # the iteration count and the weights)
        optimizer._create_all_weights(model.trainable_variables)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(self.checkpoint, os.path.join(folder, self.manifest.rank_folder(rank)),
                                                  max_to_keep=keep, checkpoint_name="ckpt")

    def follow(self, rank: int, size: int) -> None:
        """This process is now ``rank`` of ``size`` (:meth:`CheckpointManifest.follow`)."""
        self.manifest.follow(rank, size)

    def restore(self) -> Optional[Dict[str, object]]:
        """Restore the newest sound checkpoint of this run; its manifest entry, or None to start from scratch.

        CheckpointError if the folder holds another run's checkpoints, or names checkpoints of which none is sound.
        """
        entry = self.manifest.resume_entry()
        if entry is not None:
            self.checkpoint.restore(self.manifest.own_files(str(entry["name"]))).assert_existing_objects_matched()
        return entry

    def save(self, epoch: int, step: int, steps_per_epoch: int, state: Dict[str, object], reason: str
             ) -> Optional[Dict[str, object]]:
        """Write a checkpoint after ``epoch`` epochs and ``step`` more steps, then the manifest naming it.

        Every rank calls it; rank 0 writes (and returns) the manifest entry, the others write their own state or
        nothing, and return None.
        """
        if self.barrier is None and self.manifest.rank != 0:
            return None
        started = time.perf_counter()
        prefix = self.manager.save(checkpoint_number=epoch * steps_per_epoch + step)
        name = os.path.basename(prefix)
        if self.barrier is not None:
            self.barrier()  # every rank's files are written before rank 0 hashes them and writes the manifest
        if self.manifest.rank != 0:
            return None
        return self.manifest.record(name, epoch, step, steps_per_epoch, state, reason, started)

    def finish(self) -> None:
        """Mark the run finished in the manifest: its checkpoints are kept, but no later attempt resumes from them."""
        self.manifest.finish()
