"""The workflow parses, lints and dry-runs with every shipped profile; bad config and profiles are named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

PROFILES = sorted(p.name for p in (REPO / "profiles").iterdir() if (p / "config.yaml").exists())
BIN = Path(sys.executable).parent


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the workflow, config, profiles, catalogue and code to run Snakemake in."""
    for part in ("workflow", "config", "profiles", "containers", "src"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "images.lock.yaml"))
    return tmp_path


def snakemake(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HVDFLOW_REGISTRY": "http://127.0.0.1:5999", "HVDFLOW_ALLOW_ROOT": "1"}
    return subprocess.run([str(BIN / "snakemake"), *args], cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def test_lint_and_snakefmt_are_clean(tree: Path) -> None:
    lint = snakemake(tree, "--profile", "profiles/local", "--lint")
    assert lint.returncode == 0 and "Congratulations, your workflow is in a good condition!" in lint.stdout + lint.stderr
    fmt = subprocess.run([str(BIN / "snakefmt"), "--check", str(REPO / "workflow")], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stderr


@pytest.mark.parametrize("profile", PROFILES)
def test_dry_run_with_every_profile(tree: Path, profile: str) -> None:
    proc = snakemake(tree, "--profile", f"profiles/{profile}", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    jobs = proc.stdout + proc.stderr
    for rule in ("pull_image", "prepare_dataset", "train", "evaluate", "plot_learning_curves", "plot_confusion_matrix"):
        assert f"rule {rule}:" in jobs or f"localrule {rule}:" in jobs


def _edit(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["experiments"]["demo"].update(epoks=3), "'epoks' was unexpected"),
    (lambda c: c["experiments"]["demo"].update(ranks="two"), "'two' is not of type 'integer'"),
    (lambda c: c["experiments"]["demo"].update(ranks=0), "0 is less than the minimum of 1"),
    (lambda c: c["experiments"]["demo"].update(image="no-such-image"),
     "experiments.demo.image: 'no-such-image' is not in the catalogue containers/catalog.yaml"),
    (lambda c: c["experiments"]["demo"].update(dataset="mnist"),
     "experiments.demo.dataset: 'mnist' is not a key of datasets (digits)"),
    (lambda c: c["datasets"]["digits"].update(source="imagenet"), "'imagenet' is not one of ['sklearn-digits']"),
    (lambda c: c.update(colour="red"), "'colour' was unexpected"),
])
def test_bad_config_is_named_at_parse_time(tree: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    _edit(tree / "config" / "config.yaml", edit)
    proc = snakemake(tree, "--profile", "profiles/local", "--dry-run")
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.update(scratch="/tmp"), "unknown key(s) scratch; valid keys:"),
    (lambda p: p.update(runtime="docker"), "runtime: 'docker' is not one of udocker, native"),
    (lambda p: p.update(launcher="horovodrun"), "launcher: 'horovodrun' is not one of gloo, mpi"),
    (lambda p: p.update(execmode="R1"), "execmode: 'R1' is not one of P1, P2"),
    (lambda p: p.update(registry="${HVDFLOW_NO_SUCH_VARIABLE}"), "environment variable $HVDFLOW_NO_SUCH_VARIABLE is not set"),
    (lambda p: p.pop("launcher"), "missing required key(s) launcher"),
])
def test_bad_profile_is_named_at_parse_time(tree: Path, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    _edit(tree / "profiles" / "local" / "hvdflow.yaml", edit)
    proc = snakemake(tree, "--profile", "profiles/local", "--dry-run")
    assert proc.returncode != 0
    assert "profiles/local/hvdflow.yaml" in proc.stdout + proc.stderr and message in proc.stdout + proc.stderr


def test_running_without_a_profile_says_so(tree: Path) -> None:
    proc = snakemake(tree, "--cores", "1", "--dry-run")
    assert proc.returncode != 0
    assert "no cluster profile: run with --profile profiles/<cluster>" in proc.stdout + proc.stderr
