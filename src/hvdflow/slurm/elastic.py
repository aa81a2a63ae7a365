"""An elastic run's workers inside one Slurm allocation: each its own one-task job step on its node, no ssh.

Where workers may run is what Slurm says of the job now: its node list (with ``--no-kill`` a node that fails leaves
it) less the nodes ``sinfo`` reports down, drained, failing or not responding, each with the job's slots per node.
Horovod's driver reads the hosts every second, so Slurm is asked at most every :data:`HOSTS_CACHE` seconds. A
worker is ``srun --nodes=1 --ntasks=1 --nodelist=NODE --overlap --kill-on-bad-exit=0 [--gres=gpu:1] python -m
hvdflow.slurm.rank_task task-<worker>.json``: its rank task forwards signals to the rank, keeps its GPU and writes
its log; Horovod's variables come from the driver through the step's environment.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

from hvdflow.config.profile import SlurmCluster
from hvdflow.errors import LaunchError
from hvdflow.launch.supervise import Supervised, signal_group, start
from hvdflow.runtime import Runtime
from hvdflow.slurm.jobinfo import healthy_nodes
from hvdflow.slurm.rank_task import DROP_SIGNAL
from hvdflow.slurm.srun import rank_program, worker_step
from hvdflow_wire.elastic import Slot
from hvdflow_wire.task import TaskFile

HOSTS_CACHE = 5.0
"""Seconds one answer of Slurm about the job's healthy nodes is used for."""


@dataclass
class SlurmWorkers:
    """Workers of an elastic run on the nodes of Slurm job ``job``, ``slots_per_node`` each (one GPU each where the
    cluster has GPUs), every one running the container command of ``runtime`` with ``binds`` and ``TMPDIR`` ``tmpdir``
    (the job's on node-local scratch)."""

    cluster: SlurmCluster
    job: str
    slots_per_node: int
    cpus_per_task: int
    runtime: Runtime
    binds: Sequence[Path]
    env: Mapping[str, str]
    logs: Path
    tmpdir: Path
    _known: dict[str, int] = field(default_factory=dict)
    _asked: Optional[float] = None

    def hosts(self) -> dict[str, int]:
        """``{node: slots}`` of the job's healthy nodes (the last answer if Slurm cannot say now)."""
        now = time.monotonic()
        if self._asked is None or now - self._asked >= HOSTS_CACHE:
            try:
                self._known = {node: self.slots_per_node for node in healthy_nodes(self.job)}
            except LaunchError as exc:
                if self._asked is None:
                    raise
                print(f"hvdflow: warning: {exc}; the nodes Slurm named last stay", file=sys.stderr)
            self._asked = now
        return dict(self._known)

    def start(self, worker: int, slot: Slot, argv: Sequence[str], env: Mapping[str, str], log: Path) -> Supervised:
        """Start ``argv`` as a one-task step on the slot's node; srun's own output beside ``log``."""
        gpus = self.cluster.gpus_per_node > 0
        task = TaskFile(argv=self.runtime.command(argv, {}, self.binds, hostenv=True), logs=str(self.logs),
                        log=str(log), launcher="gloo", elastic=True, network_interface=self.cluster.network_interface,
                        max_ranks_per_node=self.slots_per_node, nvidia=self.runtime.gpu_setup() if gpus else None,
                        tmpdir=str(self.tmpdir))
        task_file = self.logs / f"task-{worker}.json"
        task.write(str(task_file))
        srun = worker_step(self.cluster, slot.hostname, self.cpus_per_task, rank_program(sys.executable, task_file))
        process = start(str(worker), srun, log.with_suffix(".srun.log"), {**self.env, **env})
        return dataclasses.replace(process, log=log)

    def drop(self, process: Supervised) -> None:
        """srun forwards :data:`~hvdflow.slurm.rank_task.DROP_SIGNAL` to the rank task, which kills the rank."""
        signal_group(process.proc, DROP_SIGNAL)
