"""Which cores each rank owns and how many threads it runs (hvdflow.launch.cpus), and that a started rank is bound."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hvdflow.errors import LaunchError
from hvdflow.launch.cpus import cpu_list, local_plan, slurm_plan
from hvdflow.launch.supervise import start, supervise
from hvdflow.slurm.jobinfo import cpus_per_task, job_fields


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
    assert slurm_plan(4, 8, "cores").threads == 8 and slurm_plan(4, 8, "cores").cores == (None,) * 4
    with pytest.raises(LaunchError, match="a rank needs at least one"):
        slurm_plan(4, 0, "cores")
    # where the plugin's job step left the variable, it is the answer, without asking the controller
    assert cpus_per_task("123", {"SLURM_CPUS_PER_TASK": "6"}) == 6


SCONTROL_LINE = ("JobId=14 JobName=e1b2 UserId=hvdflow-ci(1001) GroupId=hvdflow-ci(1001) MCS_label=N/A Priority=1 "
                 "Account=(null) QOS=normal JobState=RUNNING Reason=None Requeue=1 Restarts=2 BatchFlag=1 "
                 "TimeLimit=01:00:00 Partition=debug NodeList=n[1-2] BatchHost=n1 NumNodes=2 NumCPUs=4 NumTasks=2 "
                 "CPUs/Task=2 ReqB:S:C:T=0:0:*:* TRES=cpu=4,mem=4000M,node=2,billing=4,gres/gpu=2 "
                 "Command=(null) WorkDir=/home/u/tree Comment=rule_train_wildcards_cluster")


def test_the_controllers_view_of_a_job_is_read_field_by_field() -> None:
    fields = job_fields(SCONTROL_LINE)
    assert (fields["JobId"], fields["Restarts"], fields["CPUs/Task"], fields["Partition"]) == ("14", "2", "2", "debug")
    assert fields["Account"] == "(null)" and fields["ReqB:S:C:T"] == "0:0:*:*"


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
