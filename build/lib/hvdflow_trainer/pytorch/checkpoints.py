"""Full-state checkpoints of a PyTorch run, named by the run's manifest
(:class:`~hvdflow_trainer.checkpoints.CheckpointManifest`).

One file per checkpoint, ``ckpt-<global step>.pt`` (``torch.save``): the model's state (parameters and buffers), the
optimizer's (momentum buffers, learning rate), the random generators' (torch's CPU generator, numpy's, Python's) and
every rank's own floating buffers (BatchNorm's running statistics follow each rank's data between two epoch ends,
where the loop averages them: a checkpoint taken mid-epoch gives each rank its own back).
The position in the epoch, the history and the epoch's running sums go into the manifest entry, which rank 0 writes
after the file. Rank 0 saves; every rank loads the same file, so all continue from identical state; the ranks meet
after a save, so none leaves before the checkpoint is on disk. When the ranks' states differ (neighbour averaging),
every rank saves its own file (rank r > 0 in ``rank-<r>/``), the ranks meet before rank 0 writes the manifest naming
them all, and each rank restores its own file of the entry.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from hvdflow_wire.replace import replaced

from ..checkpoints import CheckpointManifest


def rng_state() -> Dict[str, object]:
    """The random generators' states: torch's CPU generator, numpy's global one, Python's."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: Dict[str, object]) -> None:
    """Put the generators back to ``state`` (from :func:`rng_state`)."""
    torch.set_rng_state(state["torch"])  # type: ignore[arg-type]
    np.random.set_state(state["numpy"])  # type: ignore[arg-type]
    random.setstate(state["python"])  # type: ignore[arg-type]


class RunCheckpoints:
    """The checkpoints of one run in ``folder``: restore the newest sound one, save new ones, keep the last ``keep``."""

    def __init__(self, folder: str, identity: Dict[str, object], keep: int, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, rank: int, size: int, barrier: Callable[[], None],
                 gather: Callable[[Any], List[Any]], per_rank: bool = False) -> None:
        """``per_rank``: every rank saves its own state (see the module's docstring); ``barrier``: all ranks meet;
        ``gather``: every rank's object, in rank order (all ranks call it)."""
        self.manifest = CheckpointManifest(folder, identity, keep, rank, size, per_rank)
        self.folder, self.model, self.optimizer, self.barrier, self.gather = folder, model, optimizer, barrier, gather

    def _own_buffers(self) -> Dict[str, torch.Tensor]:
        """This rank's floating buffers, by name, copied to the CPU."""
        return {name: buffer.detach().cpu().clone() for name, buffer in self.model.named_buffers()
                if buffer.is_floating_point()}

    def follow(self, rank: int, size: int) -> None:
        """This process is now ``rank`` of ``size`` (:meth:`CheckpointManifest.follow`)."""
        self.manifest.follow(rank, size)

    def restore(self) -> Optional[Dict[str, object]]:
        """Load the newest sound checkpoint of this run into the model, optimizer and generators; its manifest entry,
        or None to start from scratch. CheckpointError if the folder holds another run's checkpoints, or names
        checkpoints of which none is sound."""
        entry = self.manifest.resume_entry()
        if entry is not None:
            state = torch.load(self.manifest.own_files(str(entry["name"])) + ".pt", weights_only=False)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            set_rng_state(state["rng"])
            rows = state.get("rank_buffers")
            if rows is not None and len(rows) == self.manifest.size:  # else an epoch end's, where all are rank 0's
                buffers = dict(self.model.named_buffers())
                with torch.no_grad():
                    for name, value in rows[self.manifest.rank].items():
                        buffers[name].copy_(value)
        return entry

    def save(self, epoch: int, step: int, steps_per_epoch: int, state: Dict[str, object], reason: str
             ) -> Optional[Dict[str, object]]:
        """Rank 0 (every rank, per rank) writes ``ckpt-<global step>.pt``, then rank 0 the manifest naming it (its
        entry is returned); every rank calls it and they meet afterwards."""
        entry = None
        started = time.perf_counter()
        name = "ckpt-%d" % (epoch * steps_per_epoch + step)
        saved: Dict[str, object] = {}
        if not self.manifest.per_rank:
            own = self._own_buffers()
            if own:
                saved["rank_buffers"] = self.gather(own)
        if self.manifest.rank == 0 or self.manifest.per_rank:
            path = self.manifest.own_files(name) + ".pt"
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with replaced(path, mode="wb", durable=True) as handle:
                torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                            "rng": rng_state(), **saved}, handle)
        if self.manifest.per_rank:
            self.barrier()  # every rank's file is written before rank 0 hashes them and writes the manifest
        if self.manifest.rank == 0:
            entry = self.manifest.record(name, epoch, step, steps_per_epoch, state, reason, started)
            self._drop_unnamed()
        self.barrier()
        return entry

    def _drop_unnamed(self) -> None:
        """Remove checkpoint files the manifest no longer names (beyond ``keep``)."""
        named = {f for entry in self.manifest.manifest["checkpoints"] for f in entry["files"]}  # type: ignore[union-attr,attr-defined]
        for rank in range(self.manifest.size if self.manifest.per_rank else 1):
            sub = self.manifest.rank_folder(rank)
            for name in os.listdir(os.path.join(self.folder, sub)):
                if name.startswith("ckpt-") and name.endswith(".pt") and os.path.join(sub, name) not in named:
                    os.unlink(os.path.join(self.folder, sub, name))

    def finish(self) -> None:
        """Mark the run finished in the manifest: its checkpoints are kept, but no later attempt resumes from them."""
        self.manifest.finish()
