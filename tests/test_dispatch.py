"""The one launch dispatcher: each request goes to exactly one launcher, chosen from where it runs, elastic or not,
and the launcher."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import pytest

import hvdflow.pipeline.dispatch as dispatch
from hvdflow.config.profile import SlurmCluster
from hvdflow.errors import LaunchError
from hvdflow.launch.cpus import local_plan
from hvdflow.launch.job import TrainingJob
from hvdflow.launch.request import ElasticLaunch, ElasticSettings, LaunchRequest
from hvdflow.runtime.udocker.client import Udocker
from hvdflow.runtime.udocker.runtime import UdockerRuntime

CLUSTER = SlurmCluster("/scratch", 0, "lo")
ELASTIC = ElasticLaunch(ElasticSettings(1, 2), 2)
LAUNCHER_FUNCTIONS = ("launch_slurm_elastic", "launch_slurm_gloo", "launch_slurm_mpi", "_local_elastic",
                      "launch_gloo_local", "launch_mpi_local")


@pytest.mark.parametrize("slurm, elastic, launcher, chosen", [
    (CLUSTER, ELASTIC, "gloo", "launch_slurm_elastic"),
    (CLUSTER, None, "gloo", "launch_slurm_gloo"),
    (CLUSTER, None, "mpi", "launch_slurm_mpi"),
    (None, ELASTIC, "gloo", "_local_elastic"),
    (None, None, "gloo", "launch_gloo_local"),
    (None, None, "mpi", "launch_mpi_local"),
])
def test_each_request_goes_to_one_launcher(slurm: Optional[SlurmCluster], elastic: Optional[ElasticLaunch],
                                           launcher: str, chosen: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []
    given: list[tuple[object, ...]] = []
    for name in LAUNCHER_FUNCTIONS:
        monkeypatch.setattr(dispatch, name, lambda *args, _name=name: (called.append(_name), given.append(args)))
    job = TrainingJob([], 2, 1, None, tmp_path / "out", tmp_path / "logs")
    runtime = UdockerRuntime(Udocker(tmp_path / "udocker", allow_root=True), "c1", "P1")
    request = LaunchRequest(job, launcher, local_plan(2, "none"), elastic, slurm)
    dispatch.launch(runtime, request)
    assert called == [chosen]
    assert len(given[0]) == 2 and given[0][1] is request  # every launcher takes the request itself
    if launcher == "mpi":  # Open MPI's ranks cannot run in udocker's runc mode: named before anything starts
        called.clear()
        with pytest.raises(LaunchError, match="execmode R1 cannot run launcher mpi: ranks in runc's namespaces"):
            dispatch.launch(replace(runtime, execmode="R1"),
                            LaunchRequest(job, launcher, local_plan(2, "none"), elastic, slurm))
        assert called == []
