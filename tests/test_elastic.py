"""Elastic runs without a cluster: the experiment's and profile's keys, the refusals, the record's timeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from hvdflow.config.experiment import TrainSpec
from hvdflow.config.profile import load_profile
from hvdflow.errors import ConfigError, LaunchError
from hvdflow.launch.elastic import timeline
from hvdflow.pipeline.stages import elastic_settings
from hvdflow.slurm.layout import job_task_resources

BASE = {"ranks": 3, "model": "mlp", "hidden_units": 8, "epochs": 2, "batch_size": 32, "learning_rate": 0.01,
        "momentum": 0.9, "warmup_epochs": 1, "seed": 1}


def profile(tmp_path: Path, **keys: object) -> Path:
    """A local profile with ``keys`` added."""
    path = tmp_path / "hvdflow.yaml"
    lines = ["registry: http://127.0.0.1:5000", "runtime: {kind: udocker}", "launcher: gloo",
             *(f"{k}: {v}" for k, v in keys.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_bounds_default_and_the_trainer_keeps_the_global_batch_of_ranks(tmp_path: Path) -> None:
    spec = TrainSpec.from_config({**BASE, "elastic": {"min_ranks": 1}})
    assert (spec.min_ranks, spec.max_ranks, spec.global_batch) == (1, 3, 96)
    args = spec.trainer_args()
    assert args[args.index("--elastic-ranks") + 1] == "3"
    assert "--elastic-ranks" not in TrainSpec.from_config(BASE).trainer_args()
    settings = elastic_settings(spec, load_profile(profile(tmp_path, elastic_cooldown_seconds=5)))
    assert settings is not None
    assert (settings.min_ranks, settings.max_ranks, settings.cooldown, settings.timeout) == (1, 3, 5, 600)
    assert settings.driver_args(3) == ["--ranks", "3", "--min-ranks", "1", "--max-ranks", "3", "--cooldown", "5",
                                       "--timeout", "600"]
    assert elastic_settings(TrainSpec.from_config(BASE), load_profile(profile(tmp_path))) is None


@pytest.mark.parametrize(("change", "message"), [
    ({"elastic": {"min_ranks": 4}}, "elastic needs 1 <= min_ranks <= ranks <= max_ranks, got min_ranks 4, ranks 3"),
    ({"elastic": {"min_ranks": 1, "max_ranks": 2}}, "got min_ranks 1, ranks 3, max_ranks 2"),
    ({"elastic": {"min_ranks": 2, "max_ranks": 5}},
     "the global batch (batch_size x ranks = 96) whatever the rank count, so it must divide among every count from "
     "min_ranks to max_ranks; it does not among 5"),
    ({"elastic": {"min_ranks": 2}, "strategy": "neighbour"}, "elastic runs use strategy allreduce"),
])
def test_bad_bounds_are_named(change: dict[str, object], message: str) -> None:
    with pytest.raises(LaunchError) as error:
        TrainSpec.from_config({**BASE, **change})
    assert message in str(error.value)


def test_the_mpi_launcher_is_refused_by_name(tmp_path: Path) -> None:
    path = profile(tmp_path)
    path.write_text(path.read_text().replace("launcher: gloo", "launcher: mpi"))
    spec = TrainSpec.from_config({**BASE, "elastic": {"min_ranks": 1}})
    with pytest.raises(LaunchError) as error:
        elastic_settings(spec, load_profile(path))
    assert (f"elastic runs need the Gloo launcher (Horovod's elastic mode has no MPI controller); the profile {path} "
            "has launcher mpi") in str(error.value)


def test_a_slurm_job_of_an_elastic_run_survives_a_lost_node_and_holds_max_ranks(tmp_path: Path) -> None:
    path = profile(tmp_path, scheduler="slurm", slurm="{scratch_dir: /tmp, gpus_per_node: 0}")
    cluster = load_profile(path).slurm
    spec = TrainSpec.from_config({**BASE, "ranks": 2, "nodes": 2, "batch_size": 48,
                                  "elastic": {"min_ranks": 2, "max_ranks": 4}})
    assert spec.slots == 4
    elastic = job_task_resources(spec.slots, spec.nodes, cluster, elastic=True)
    assert (elastic["tasks_per_node"], elastic["slurm_extra"]) == (2, "--signal=USR1@120 --open-mode=append --no-kill")
    assert "--no-kill" not in str(job_task_resources(2, 2, cluster)["slurm_extra"])


@pytest.mark.parametrize(("value", "message"), [
    (0, "elastic_cooldown_seconds: must be 1 to 3600 seconds, got 0"),
    (7200, "must be 1 to 3600 seconds, got 7200"),
    ("soon", "elastic_cooldown_seconds"),
])
def test_a_bad_cooldown_is_named(tmp_path: Path, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_profile(profile(tmp_path, elastic_cooldown_seconds=value))
    assert message in str(error.value)


def test_the_timeline_gives_each_membership_its_reason_and_each_epoch_its_throughput() -> None:
    events = [
        {"unix": 100.0, "event": "hosts", "hosts": {"a-0": 1, "a-1": 1}},
        {"unix": 100.1, "event": "start", "worker": 0, "slot": {"hostname": "a-0"}},
        {"unix": 100.1, "event": "start", "worker": 1, "slot": {"hostname": "a-1"}},
        {"unix": 105.0, "event": "membership", "epoch": 0, "step": 0, "ranks": 2, "hosts": ["a-1", "a-0"]},
        {"unix": 106.0, "event": "epoch", "epoch": 1, "ranks": 2, "samples": 96, "seconds": 0.5},
        {"unix": 107.0, "event": "exit", "worker": 1, "code": -9, "host": "a-1", "why": "exited with status -9"},
        {"unix": 109.0, "event": "hosts", "hosts": {"a-0": 1}},
        {"unix": 140.0, "event": "membership", "epoch": 1, "step": 0, "ranks": 1, "hosts": ["a-0"]},
        {"unix": 150.0, "event": "start", "worker": 2, "slot": {"hostname": "a-1"}},
        {"unix": 158.0, "event": "membership", "epoch": 2, "step": 0, "ranks": 2, "hosts": ["a-0", "a-1"]},
        {"unix": 160.0, "event": "exit", "worker": 0, "code": 0, "host": "a-0", "why": "exited with status 0"},
    ]
    assert timeline(events) == {
        "memberships": [
            {"seconds": 5.0, "epoch": 0, "step": 0, "ranks": 2, "hosts": ["a-0", "a-1"], "reason": "start"},
            {"seconds": 40.0, "epoch": 1, "step": 0, "ranks": 1, "hosts": ["a-0"],
             "reason": "worker 1 on a-1 exited with status -9; hosts now a-0 (1 slot)"},
            {"seconds": 58.0, "epoch": 2, "step": 0, "ranks": 2, "hosts": ["a-0", "a-1"],
             "reason": "worker 2 started on a-1"}],
        "epochs": [{"seconds": 6.0, "epoch": 1, "ranks": 2, "samples": 96, "epoch_seconds": 0.5}],
    }
