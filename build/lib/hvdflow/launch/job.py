"""A job of Horovod ranks as every launcher takes it: the in-container program and its options, the layout of its
ranks, and its folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence


@dataclass(frozen=True)
class TrainingJob:
    """``ranks`` Horovod ranks over ``nodes`` nodes, each running ``python3 -m <module>`` with ``trainer_args``.

    The ranks read the prepared dataset at ``dataset_dir`` (or a node-local copy of it; None: a program that reads
    none, such as the benchmark's) and write to ``out_dir``; rank logs and the rendezvous files go to ``logs_dir``.
    ``read_paths`` are host folders the ranks only read (a user's own code).
    """

    trainer_args: Sequence[str]
    ranks: int
    nodes: int
    dataset_dir: Optional[Path]
    out_dir: Path
    logs_dir: Path
    module: str = "hvdflow_trainer.train"
    read_paths: Sequence[Path] = ()

    def argv(self, dataset_dir: Optional[Path] = None) -> list[str]:
        """The program's command line, reading ``dataset_dir`` (default: the prepared dataset itself, if any)."""
        data = dataset_dir or self.dataset_dir
        return ["python3", "-m", self.module, *(["--dataset", str(data)] if data else []), "--out", str(self.out_dir),
                *self.trainer_args]

    def paths(self) -> list[Path]:
        """The host folders the ranks read and write (bound into containers): the outputs, the dataset and the
        folders they only read."""
        return [self.out_dir] + ([self.dataset_dir] if self.dataset_dir else []) + list(self.read_paths)
