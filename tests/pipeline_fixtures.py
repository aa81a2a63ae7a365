"""Fixtures of the pipeline's end-to-end tests that several test modules share (a plugin of conftest.py, so that a
session-scoped one runs once for all of them)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from conftest import HpcUser, Registry
from pipeline_run import Pipeline


@pytest.fixture(scope="session")
def demo(hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> Iterator[Pipeline]:
    """The demo pipeline, run once for the session: its image record and prepared digits serve the trees that
    start from it (``Pipeline(..., prepared=demo)``)."""
    pipeline = Pipeline(hpc_user, registry, udocker_dir)
    proc = pipeline.snakemake(extra_env={"HVDFLOW_PROGRESS_SECONDS": "0.2"})  # progress lines of its short steps
    assert proc.returncode == 0, proc.stderr[-5000:]
    yield pipeline


@pytest.fixture(scope="session")
def prepared(hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> Pipeline:
    """A tree with the image pulled and the digits prepared (on this machine), once for the session: what the trees
    of training tests start from where they need no trained demo (the determinism matrix, the test bed's runs; the
    Slurm path of the preparation is test_slurm_cluster's ``cluster_run``)."""
    pipeline = Pipeline(hpc_user, registry, udocker_dir)
    proc = pipeline.snakemake("--until", "prepare_dataset")
    assert proc.returncode == 0, proc.stderr[-5000:]
    return pipeline
