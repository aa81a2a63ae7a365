"""The task file of a Slurm rank task (``task.json``, or ``task-<worker>.json`` for an elastic worker).

The Slurm launcher writes it; ``python -m hvdflow.slurm.rank_task TASK.json`` reads it on the rank's node, finds its
rank, and runs ``argv`` (the runtime's command of the trainer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from .values import WireError, from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class NvidiaSetup:
    """The udocker containers to set up for NVIDIA (``udocker setup --nvidia``) on a node with a driver (both of
    ``execmode: auto``'s: the rank's node chooses which one runs)."""

    udocker_dir: str
    containers: List[str]


@dataclass(frozen=True)
class TaskFile:
    """What one rank task runs, and where its files go.

    A fixed run's task (``elastic`` false) names the rank's ``result`` (``{rank}`` in it is the rank) and the Gloo
    ``rendezvous`` file; an elastic worker's names the ``log`` its launcher reads (its placement comes from
    Horovod's driver). ``max_ranks_per_node`` is the job's plan, which a task checks Slurm's placement against.
    ``tmpdir`` is the ranks' ``TMPDIR`` on every node: ``tmp`` in the job's folder on node-local scratch, which the
    staging step made private there and the clean-up removes with the rest of the job's folder.
    """

    argv: List[str]
    logs: str
    launcher: str
    network_interface: str
    max_ranks_per_node: int
    nvidia: Optional[NvidiaSetup]
    result: Optional[str] = None
    rendezvous: Optional[str] = None
    log: Optional[str] = None
    elastic: bool = False
    tmpdir: Optional[str] = None

    def __post_init__(self) -> None:
        if self.elastic and self.log is None:
            raise WireError("an elastic worker's task names no log")
        if not self.elastic and (self.result is None or self.rendezvous is None):
            raise WireError("a fixed run's task names no result or no rendezvous file")

    def write(self, path: str) -> None:
        """Write the task file (atomically)."""
        write_object(str(path), to_json(self))

    @classmethod
    def read(cls, path: str) -> "TaskFile":
        """The task file at ``path``; WireError naming what is wrong with it."""
        return from_json(cls, read_object(str(path)), str(path))
