"""The test bed's rendered configuration: process tracking, cgroups, and a bad choice named (no daemons started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hvdflow.errors import HvdflowError
from hvdflow.testbed import config as tc
from hvdflow.testbed.cluster import default_layout


def test_process_tracking_is_linuxproc_unless_cgroup_is_chosen(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HVDFLOW_TESTBED_PROCTRACK", raising=False)
    assert "ProctrackType=proctrack/linuxproc\n" in tc.slurm_conf(default_layout(tmp_path))
    monkeypatch.setenv("HVDFLOW_TESTBED_PROCTRACK", "cgroup")
    layout = default_layout(tmp_path)
    assert "ProctrackType=proctrack/cgroup\n" in tc.slurm_conf(layout)
    assert "CgroupPlugin=cgroup/v1\n" in tc.cgroup_conf(layout) and "CgroupAutomount=no\n" in tc.cgroup_conf(layout)
    # each node gets a freezer cgroup of its own, so two slurmds on one machine never share one
    assert [layout.freezer_dir(n) for n in layout.node_names] == [tc.FREEZER / "hvdtb-n1", tc.FREEZER / "hvdtb-n2"]


def test_an_unknown_process_tracking_is_named(tmp_path: Path) -> None:
    with pytest.raises(HvdflowError, match="test-bed proctrack 'pgid': expected one of linuxproc, cgroup"):
        default_layout(tmp_path, proctrack="pgid")


def test_the_test_bed_is_a_cluster_unlike_the_shipped_profiles(tmp_path: Path) -> None:
    # what hvdflow site new is tested against (test_slurm_cluster.py): two GPU types on each node, a second partition
    # with a time limit, a per-job $TMPDIR made by the task prolog and removed by the epilog
    layout = default_layout(tmp_path)
    conf = tc.slurm_conf(layout)
    assert "Gres=gpu:a100:2,gpu:h100:2 " in conf and "AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:h100\n" in conf
    assert "PartitionName=accel Nodes=ALL Default=NO MaxTime=04:00:00 State=UP\n" in conf
    assert f"TaskProlog={tmp_path}/etc/task_prolog.sh\n" in conf and f"Epilog={tmp_path}/etc/epilog.sh\n" in conf
    assert tc.gres_conf(layout).splitlines()[:2] == [
        f"NodeName=n1 Name=gpu Type=a100 File={tmp_path}/nodes/n1/dev/nvidia[0-1]",
        f"NodeName=n1 Name=gpu Type=h100 File={tmp_path}/nodes/n1/dev/nvidia[2-3]"]
    assert f"echo export TMPDIR={tmp_path}/localtmp/job-$SLURM_JOB_ID" in tc.task_prolog(layout)
    assert f"rm -rf {tmp_path}/localtmp/job-$SLURM_JOB_ID" in tc.epilog(layout)
    assert (layout.node_addr("n2"), layout.fast_addr("n2")) == ("10.213.47.12", "10.213.48.12")
    with pytest.raises(HvdflowError, match=r"test-bed gpus_per_node 3: must split evenly over \('a100', 'h100'\)"):
        tc.Layout(base=tmp_path, gpus_per_node=3)
