"""Golden command lines of every job step a Slurm training starts (:mod:`hvdflow.slurm.srun`), per Slurm profile.

Regenerate with ``HVDFLOW_UPDATE_GOLDEN=1`` when a change is intended, and read the difference.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import REPO
from hvdflow.config.profile import load_profile
from hvdflow.slurm.srun import cleanup_step, mpirun_ranks, rank_program, ranks_step, staging_step, worker_step

GOLDEN = REPO / "tests" / "golden"
SLURM_PROFILES = sorted(p.name for p in (REPO / "profiles").iterdir()
                        if (p / "config.yaml").is_file() and "executor: slurm" in (p / "config.yaml").read_text())
PYTHON, LOGS, JOB_DIR = "PYTHON", Path("/LOGS"), Path("/SCRATCH/hvdflow-user/job-42")
CPUS_PER_TASK = 4


def step_lines(profile: str) -> str:
    """Each job step's command line for 8 ranks over 2 nodes (and 5 over 2, an uneven layout) under ``profile``."""
    cluster = load_profile(REPO / "profiles" / profile / "hvdflow.yaml").slurm
    assert cluster is not None
    task = rank_program(PYTHON, LOGS / "task.json")
    lines = {
        "staging": staging_step(cluster, 8, 2, CPUS_PER_TASK, PYTHON, "/DATASET", JOB_DIR / "dataset", LOGS / "staging",
                                "41,42"),
        "ranks": ranks_step(cluster, 8, 2, task, CPUS_PER_TASK),
        "ranks, uneven": ranks_step(cluster, 5, 2, task, CPUS_PER_TASK),
        "mpirun": mpirun_ranks(8, task),
        "elastic worker": worker_step(cluster, "node2", CPUS_PER_TASK, rank_program(PYTHON, LOGS / "task-3.json")),
        "clean-up": cleanup_step(2, JOB_DIR, PYTHON),
    }
    return "".join(f"# {name}\n{' '.join(argv)}\n" for name, argv in lines.items())


def test_there_are_slurm_profiles_to_check() -> None:
    assert {"slurm", "testbed"} <= set(SLURM_PROFILES)


@pytest.mark.parametrize("profile", SLURM_PROFILES)
def test_the_job_steps_of_each_slurm_profile_are_golden(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_REGISTRY", os.environ.get("HVDFLOW_REGISTRY", "http://127.0.0.1:5999"))
    golden = GOLDEN / f"{profile}.steps.txt"
    got = step_lines(profile)
    if os.environ.get("HVDFLOW_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text(), f"regenerate with HVDFLOW_UPDATE_GOLDEN=1 if the change is intended:\n{got}"
