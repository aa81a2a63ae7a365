"""Full-state checkpoints of a training run with TensorFlow's own machinery, named by the run's manifest.

``tf.train.Checkpoint`` holds the model's weights (BatchNorm statistics included), the optimizer's variables (its
iteration count, its slots and the hyper variables (learning rate, momentum) that Horovod's warm-up changes), the
state of the model's random generators (:mod:`.randomness`: a seeded Dropout's masks go on where they were), and, for
a model with non-trainable weights, every rank's own values of them (:class:`RankStatistics`).
``tf.train.CheckpointManager`` writes ``ckpt-<global step>`` and keeps the last few. The manifest and the decision
where to resume are the framework's neutral part (:class:`~hvdflow_trainer.checkpoints.CheckpointManifest`). Rank 0
saves; every rank restores the same checkpoint, so all of them continue from identical state. When the ranks' states
differ (neighbour averaging), every rank saves its own files; the ranks meet before rank 0 writes the manifest, and
each rank restores its own files of the entry rank 0 picked.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Dict, List, Optional

import tensorflow as tf

from ..checkpoints import CheckpointManifest
from .randomness import model_generators

Gather = Callable[[tf.Tensor, str], tf.Tensor]
"""Every rank's tensor stacked along a new first axis, in rank order (Horovod's allgather; all ranks call it)."""


def floating_non_trainable(model) -> list:  # type: ignore[no-untyped-def,type-arg]
    """The model's floating non-trainable weights (BatchNorm's moving mean and variance, any layer's running
    state), in the model's order."""
    return [weight for weight in model.non_trainable_weights if weight.dtype.is_floating]


class RankStatistics:
    """Every rank's own non-trainable weights, held in rank 0's checkpoint.

    Between two epoch ends each rank's BatchNorm statistics follow its own share of the data (they are averaged over
    the ranks at the epoch's end), so a checkpoint taken mid-epoch must hold each rank's, not only rank 0's: before a
    save every rank's values are gathered into one variable per weight (``[ranks, *shape]``, of any shape, so that a
    checkpoint of another rank count still reads), and after a restore each rank takes its own row back.
    """

    def __init__(self, weights: list, gather: Gather) -> None:  # type: ignore[type-arg]
        self.weights, self.gather = weights, gather
        self.rows: List[tf.Variable] = [tf.Variable(tf.zeros([1, *w.shape], w.dtype), shape=tf.TensorShape(None),
                                                    trainable=False) for w in weights]

    def gathered(self) -> None:
        """Every rank's values into the rows (every rank calls it)."""
        for i, (weight, rows) in enumerate(zip(self.weights, self.rows)):
            rows.assign(self.gather(tf.expand_dims(weight.value(), 0), "hvdflow_rank_statistics_%d" % i))

    def take_own(self, rank: int, size: int) -> None:
        """This rank's values back from the restored rows; rows of another rank count (an elastic run's checkpoint,
        taken at an epoch's end where every rank's are the same) leave rank 0's, which the model restored."""
        for weight, rows in zip(self.weights, self.rows):
            value = rows.value()  # the variable's own shape is unknown; its value's is the saved one
            if value.shape[0] == size:
                weight.assign(value[rank])


class RunCheckpoints:
    """The checkpoints of one run in ``folder``: restore the newest sound one, save new ones, keep the last ``keep``."""

    def __init__(self, folder: str, identity: Dict[str, object], keep: int, model, optimizer,  # type: ignore[no-untyped-def]
                 rank: int = 0, size: int = 1, barrier: Optional[Callable[[], None]] = None,
                 gather: Optional[Gather] = None) -> None:
        """``barrier`` (all ranks call it) given: every rank saves its own state (see the module's docstring);
        ``gather`` given (and no ``barrier``): rank 0's checkpoints hold every rank's non-trainable weights."""
        self.manifest = CheckpointManifest(folder, identity, keep, rank, size, per_rank=barrier is not None)
        self.barrier = barrier
        # the optimizer's variables exist before a restore or a save, without a training step (which would change
        # the iteration count and the weights)
        optimizer._create_all_weights(model.trainable_variables)
        parts: Dict[str, object] = {"model": model, "optimizer": optimizer}
        generators = model_generators(model)
        if generators:
            parts["random_generators"] = [generators[path] for path in sorted(generators)]
        self.statistics = None
        weights = floating_non_trainable(model)
        if weights and gather is not None and barrier is None:
            self.statistics = RankStatistics(weights, gather)
            parts["rank_statistics"] = self.statistics.rows
        self.checkpoint = tf.train.Checkpoint(**parts)
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
            if self.statistics is not None:
                self.statistics.take_own(self.manifest.rank, self.manifest.size)
        return entry

    def save(self, epoch: int, step: int, steps_per_epoch: int, state: Dict[str, object], reason: str
             ) -> Optional[Dict[str, object]]:
        """Write a checkpoint after ``epoch`` epochs and ``step`` more steps, then the manifest naming it.

        Every rank calls it; rank 0 writes (and returns) the manifest entry, the others write their own state or
        nothing, and return None.
        """
        if self.statistics is not None:
            self.statistics.gathered()
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
