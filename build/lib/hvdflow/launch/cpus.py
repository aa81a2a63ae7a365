"""Which cores each rank owns, and how many threads it runs: the CPU binding of a training.

On one machine (no Slurm) the ranks share the cores this process may run on (its affinity mask): with the profile's
``cpu_bind: cores`` each rank gets ``cores // ranks`` of them, its own, set with ``sched_setaffinity`` before it
starts; with ``cpu_bind: none``, or with more ranks than cores, the ranks are not bound and each runs
``max(1, cores // ranks)`` threads. Under Slurm the job's ``--cpus-per-task`` (:func:`hvdflow.slurm.jobinfo.cpus_per_task`;
Slurm's default is 1) is what each rank owns, and srun binds it (``--cpu-bind`` from the profile).
Either way the trainer's TensorFlow and tf.data threads are that count; it is recorded per rank in run.json, since
the thread count can change the order of floating-point sums.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

from hvdflow.config.profile import LOCAL_CPU_BINDS
from hvdflow.errors import LaunchError


@dataclass(frozen=True)
class CpuPlan:
    """Each rank's cores (``None``: not bound) and the threads every rank runs; ``why`` says how it was chosen."""

    cores: tuple[Optional[tuple[int, ...]], ...]
    threads: int
    why: str

    def cores_of(self, rank: int) -> Optional[tuple[int, ...]]:
        """The cores rank ``rank`` is bound to, or None."""
        return self.cores[rank]


def local_plan(ranks: int, bind: str, available: Optional[Sequence[int]] = None) -> CpuPlan:
    """The binding of ``ranks`` ranks on this machine for the profile's ``cpu_bind`` (``cores`` or ``none``).

    ``available`` defaults to this process's affinity mask, so a job confined to some cores (a cgroup, taskset)
    divides those.
    """
    if bind not in LOCAL_CPU_BINDS:
        raise LaunchError(f"cpu_bind: {bind!r} is not one of {', '.join(LOCAL_CPU_BINDS)} on a profile without a "
                          "scheduler")
    if ranks < 1:
        raise LaunchError(f"{ranks} ranks: at least one is needed")
    cores = sorted(os.sched_getaffinity(0) if available is None else available)
    per_rank = max(1, len(cores) // ranks)
    if bind == "none":
        return CpuPlan((None,) * ranks, per_rank, f"not bound (cpu_bind: none), {per_rank} thread(s) per rank")
    if ranks > len(cores):
        return CpuPlan((None,) * ranks, 1, f"not bound: {ranks} ranks on {len(cores)} core(s), 1 thread per rank")
    sets = tuple(tuple(cores[r * per_rank:(r + 1) * per_rank]) for r in range(ranks))
    return CpuPlan(sets, per_rank, f"{per_rank} core(s) per rank of {len(cores)} ({cpu_list(cores)})")


def slurm_plan(ranks: int, cpus_per_task: int, bind: str) -> CpuPlan:
    """The binding of a Slurm job's ranks: each owns the job's ``cpus_per_task`` CPUs, bound by srun with
    ``--cpu-bind=<bind>``."""
    if cpus_per_task < 1:
        raise LaunchError(f"the job gives each task {cpus_per_task} CPUs: a rank needs at least one")
    return CpuPlan((None,) * ranks, cpus_per_task,
                   f"{cpus_per_task} per rank (the job's --cpus-per-task), srun --cpu-bind={bind}")


def cpu_list(cores: Sequence[int]) -> str:
    """``cores`` in the kernel's list format: ``0-3,8``."""
    runs: list[list[int]] = []
    for core in sorted(set(cores)):
        if runs and core == runs[-1][1] + 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)
