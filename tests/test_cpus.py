"""Which cores each rank owns and how many threads it runs (hvdflow.launch.cpus), and that a started rank is bound."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hvdflow.errors import LaunchError
from hvdflow.launch.cpus import cpu_list, local_plan, slurm_plan
from hvdflow.launch.supervise import start, supervise


def test_ranks_that_fit_get_their_own_equal_share_of_the_cores() -> None:
    plan = local_plan(2, "cores", [0, 1, 2, 3, 4])
    assert (plan.cores, plan.threads) == (((0, 1), (2, 3)), 2)  # core 4 is left over, not shared
    assert local_plan(2, "cores", [4, 6]).cores == ((4,), (6,))
    assert "1 core(s) per rank of 2 (4,6)" == local_plan(2, "cores", [6, 4]).why


def test_more_ranks_than_cores_or_bind_none_leave_the_ranks_unbound() -> None:
    over = local_plan(3, "cores", [0, 1])
    assert (over.cores, over.threads) == ((None, None, None), 1) and "not bound: 3 ranks on 2 core(s)" in over.why
    unbound = local_plan(2, "none", [0, 1, 2, 3])
    assert (unbound.cores, unbound.threads) == ((None, None), 2)


def test_a_local_bind_other_than_cores_or_none_is_named() -> None:
    with pytest.raises(LaunchError, match="cpu_bind: 'sockets' is not one of cores, none"):
        local_plan(2, "sockets", [0, 1])


def test_under_slurm_each_rank_owns_the_jobs_cpus_per_task() -> None:
    assert slurm_plan(4, {"SLURM_CPUS_PER_TASK": "8"}, "cores").threads == 8
    assert slurm_plan(4, {}, "cores").threads == 1  # the job asked for none: Slurm's default of one CPU per task
    with pytest.raises(LaunchError, match="SLURM_CPUS_PER_TASK='x' is not a number"):
        slurm_plan(4, {"SLURM_CPUS_PER_TASK": "x"}, "cores")
    with pytest.raises(LaunchError, match="at least one CPU"):
        slurm_plan(4, {"SLURM_CPUS_PER_TASK": "0"}, "cores")


def test_cpu_lists_are_written_as_the_kernel_writes_them() -> None:
    assert cpu_list([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_list([5]) == "5"


def test_a_started_process_and_its_children_run_on_the_cores_given(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    child = "import os; print(sorted(os.sched_getaffinity(0)))"
    argv = [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"]
    proc = start("bound", argv, tmp_path / "bound.log", dict(os.environ), rank=True, cores=cores[-1:])
    supervise([proc], 60)
    assert (tmp_path / "bound.log").read_text().splitlines()[-1] == str(cores[-1:])
