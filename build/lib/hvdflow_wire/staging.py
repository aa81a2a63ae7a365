"""The staging step's reports (``<logs>/staging/task-<rank>.json``): what srun told each task of the staging job step.

Every task of the staging step (``hvdflow.slurm.staging``, run with the training's layout) writes one; the Slurm
launcher reads them for the allocation Open MPI's Slurm support needs (the MPI mode), and the run record for the
nodes, the tasks per node, what was copied on each node and where each job step imported hvdflow from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional

from .values import WireError, from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class StagingReport:
    """One staging task's report: its Slurm task variables as srun set them (None where unset), the host, the bytes
    it copied (None for a task that waited for its node's first task), the ended jobs' folders it swept, its
    seconds, and the folder it imported hvdflow from."""

    GLOB: ClassVar[str] = "task-*.json"
    JSON_KEYS: ClassVar[Dict[str, str]] = {
        "procid": "SLURM_PROCID", "localid": "SLURM_LOCALID", "nodeid": "SLURM_NODEID",
        "nodename": "SLURMD_NODENAME", "step_nodelist": "SLURM_STEP_NODELIST",
        "step_tasks_per_node": "SLURM_STEP_TASKS_PER_NODE", "step_num_nodes": "SLURM_STEP_NUM_NODES",
        "step_num_tasks": "SLURM_STEP_NUM_TASKS"}
    procid: str
    localid: Optional[str]
    nodeid: Optional[str]
    nodename: Optional[str]
    step_nodelist: Optional[str]
    step_tasks_per_node: Optional[str]
    step_num_nodes: Optional[str]
    step_num_tasks: Optional[str]
    hostname: str
    bytes_copied: Optional[int]
    swept: List[str]
    seconds: float
    hvdflow_source: str

    def __post_init__(self) -> None:
        if not (self.procid.isascii() and self.procid.isdigit()):
            raise WireError("SLURM_PROCID is %r, expected a task number" % self.procid)

    @property
    def rank(self) -> int:
        """The task's number in the step (``SLURM_PROCID``)."""
        return int(self.procid)

    def write(self, folder: str) -> None:
        """Write ``task-<rank>.json`` into the reports' folder atomically."""
        write_object(os.path.join(str(folder), "task-%s.json" % self.procid), to_json(self), end="\n")

    @classmethod
    def read(cls, path: str) -> "StagingReport":
        """The report at ``path``; WireError naming the file and what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))
