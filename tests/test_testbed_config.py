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
