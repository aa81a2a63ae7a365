"""A training job as every launcher takes it: the trainer's options, the layout of its ranks, and its folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence


@dataclass(frozen=True)
class TrainingJob:
    """``ranks`` Horovod ranks over ``nodes`` nodes, each running the trainer with ``trainer_args``.

    The ranks read the prepared dataset at ``dataset_dir`` (or a node-local copy of it) and write to ``out_dir``;
    rank logs and the rendezvous files go to ``logs_dir``.
    """

    trainer_args: Sequence[str]
    ranks: int
    nodes: int
    dataset_dir: Path
    out_dir: Path
    logs_dir: Path

    def argv(self, dataset_dir: Optional[Path] = None) -> list[str]:
        """The trainer's command line, reading ``dataset_dir`` (default: the prepared dataset itself)."""
        return ["python3", "-m", "hvdflow_trainer.train", "--dataset", str(dataset_dir or self.dataset_dir),
                "--out", str(self.out_dir), *self.trainer_args]
