"""``hvdflow doctor`` on this machine: the command itself, run in a workflow tree against the test registry (a real
image served, then the registry gone), a bad profile named, and the pieces it reads Slurm's answers with. Its
checks on the Slurm test bed (a compute node through a real job, and failures made real there) are in
tests/test_slurm_cluster.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, TinyRepo
from hvdflow.doctor.findings import (
    CHECK_WIDTH,
    FAILURE,
    OK,
    WARNING,
    Finding,
    exit_status,
    render_counts,
    render_finding,
    render_text,
)
from hvdflow.doctor.node import MARKER, NodeReport, gpus, read_node_report
from hvdflow.doctor.profile_files import find_profile_folder, load_doctor_profile
from hvdflow.errors import ConfigError
from hvdflow.slurm.cluster_info import can_run_jobs, slurm_minutes
from hvdflow.slurm.probe_job import Stopped, stop_on_signals
from hvdflow_wire import WireError


def _tree(root: Path, tiny_repo: TinyRepo, registry_url: str, profile_extra: str = "") -> Path:
    """A workflow tree: a config whose experiment runs in the tiny image, and a profile ``site`` for this machine."""
    (root / "config").mkdir(parents=True)
    (root / "containers").mkdir()
    (root / "containers" / "catalog.yaml").write_text(
        "images:\n  tiny:\n    description: busybox test image\n"
        f"    repository: {tiny_repo.repository}\n    tag: v1\n"
        "    device: cpu\n    python: none\n    tensorflow: none\n    horovod: none\n    mpi: none\n"
        "    execmode: P1\n    purposes: [train]\n    tested: true\n")
    (root / "config" / "config.yaml").write_text(
        "catalog: containers/catalog.yaml\nlock: containers/images.lock.yaml\n"
        "datasets: {}\nexperiments:\n  demo: {image: tiny, dataset: digits, model: mlp}\n")
    site = root / "profiles" / "site"
    site.mkdir(parents=True)
    (site / "config.yaml").write_text("cores: 2\nconfig:\n  - hvdflow_profile=profiles/site/hvdflow.yaml\n")
    (site / "hvdflow.yaml").write_text(f"registry: {registry_url}\nlauncher: gloo\n"
                                       f"runtime: {{kind: udocker, execmode: P1, udocker_dir: {root / 'udocker'}}}\n"
                                       f"{profile_extra}")
    return root


def _doctor(root: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([sys.executable, "-m", "hvdflow", "doctor", "--json", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.startswith("{"), proc.stderr[-3000:]  # a report, not a crash
    return proc, json.loads(proc.stdout)


def _by_check(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {f["check"]: f for f in report["findings"]}


def test_doctor_finds_the_image_at_the_registry_then_names_the_registry_gone_with_the_fix(
        tiny_repo: TinyRepo, tmp_path: Path) -> None:
    image = tiny_repo.push("v1")
    root = _tree(tmp_path / "tree", tiny_repo, tiny_repo.registry.url)
    proc, report = _doctor(root, "--profile", "site")
    found = _by_check(report)
    assert proc.returncode == 0 and report["exit_status"] == 0, proc.stdout + proc.stderr
    assert found["image tiny"]["status"] == OK, found
    assert image.manifest_digest in found["image tiny"]["detail"] and "not pinned yet" in found["image tiny"]["detail"]
    assert found["python"]["status"] == OK and found["profile"]["status"] == OK, found
    udocker = found["udocker directory"]
    # ok, or the warning of a disk with under 10 GiB free (this machine's own state, not the profile's)
    assert (udocker["status"] == OK or udocker["fix"].startswith("free at least")) and "will be made" in udocker["detail"]
    assert found["proot"]["status"] == WARNING  # nothing pulled into this udocker directory yet
    assert "slurm client" not in found  # scheduler: none
    assert found["image builds"] == {"check": "image builds", "status": OK, "detail": "as root (mmdebstrap, chroot)",
                                     "fix": ""}, found
    assert report["profile"] == str(root / "profiles" / "site") and report["host"]

    (root / "profiles" / "site" / "hvdflow.yaml").write_text(
        (root / "profiles" / "site" / "hvdflow.yaml").read_text().replace(tiny_repo.registry.url, "http://127.0.0.1:9"))
    proc, report = _doctor(root, "--profile", "site")
    image_finding = _by_check(report)["image tiny"]
    assert proc.returncode == 1 and report["exit_status"] == 1
    assert image_finding["status"] == FAILURE
    assert "http://127.0.0.1:9 is not reachable" in image_finding["detail"], image_finding
    assert "hvdflow image load tiny ARCHIVE" in image_finding["fix"], image_finding
    assert not (root / "udocker").exists()  # the doctor looks; it makes nothing


def test_doctor_names_a_bad_profile_file_and_exits_1(tiny_repo: TinyRepo, tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree", tiny_repo, tiny_repo.registry.url, profile_extra="gpus: 4\n")
    proc, report = _doctor(root, "--profile", "site")
    bad = _by_check(report)["profile and config"]
    assert proc.returncode == 1 and bad["status"] == FAILURE
    assert str(root / "profiles" / "site" / "hvdflow.yaml") in bad["detail"] and "gpus" in bad["detail"], bad
    text = subprocess.run([sys.executable, "-m", "hvdflow", "doctor", "--profile", "nope"], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src")}, capture_output=True, text=True)
    assert text.returncode == 1
    assert "FAILURE" in text.stdout and "profile nope: no config.yaml in" in text.stdout, text.stdout


def test_a_profile_is_found_where_snakemake_finds_it_then_in_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                      ) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for folder in (tmp_path / "work" / "profiles" / "site", tmp_path / "xdg" / "snakemake" / "site",
                   tmp_path / "work" / "mine"):
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text("cores: 1\n")
    work = tmp_path / "work"
    assert find_profile_folder("site", work) == tmp_path / "xdg" / "snakemake" / "site"  # installed wins
    assert find_profile_folder("mine", work) == work / "mine"
    assert find_profile_folder("profiles/site", work) == work / "profiles" / "site"
    with pytest.raises(ConfigError, match="profile gone: no config.yaml in .*hvdflow profile install"):
        find_profile_folder("gone", work)
    with pytest.raises(ConfigError, match="has no hvdflow_profile="):
        load_doctor_profile("mine", work)


def test_the_train_rules_slurm_resources_come_from_set_resources_before_default_resources(tmp_path: Path) -> None:
    shutil_profile = tmp_path / "profiles" / "c"
    shutil_profile.mkdir(parents=True)
    (shutil_profile / "hvdflow.yaml").write_text(
        "registry: none\nruntime: {kind: udocker}\nlauncher: gloo\nscheduler: slurm\n"
        "slurm:\n  scratch_dir: /tmp\n  gpus_per_node: 2\n")
    (shutil_profile / "config.yaml").write_text(
        "config:\n  - hvdflow_profile=profiles/c/hvdflow.yaml\n"
        "default-resources:\n  slurm_partition: cpu\n  slurm_account: proj\n  runtime: 30\n"
        "set-resources:\n  train:\n    slurm_partition: gpu\n    runtime: 240\n")
    profile = load_doctor_profile("profiles/c", tmp_path)
    assert (profile.partition, profile.account, profile.runtime_minutes) == ("gpu", "proj", 240)
    assert profile.cluster.slurm is not None and profile.cluster.slurm.gpus_per_node == 2


@pytest.mark.parametrize("limit, minutes", [("infinite", None), ("UNLIMITED", None), ("30", 30.0), ("45:30", 45.5),
                                            ("2:00:00", 120.0), ("1-00:00:00", 1440.0), ("2-12:30:00", 3630.0)])
def test_slurm_time_limits_as_sinfo_prints_them(limit: str, minutes: float | None) -> None:
    assert slurm_minutes(limit) == minutes


@pytest.mark.parametrize("state, usable", [
    ("idle", True), ("mixed", True), ("allocated", True), ("completing", True), ("idle~", True), ("idle#", True),
    ("drained", False), ("draining", False), ("down", False), ("down*", False), ("idle*", False),
    ("reserved", False), ("maint", False), ("idle$", False), ("fail", False), ("inval", False)])
def test_a_node_can_run_jobs_in_the_states_slurm_schedules_on(state: str, usable: bool) -> None:
    assert can_run_jobs(state) is usable


def test_a_stop_signal_while_the_doctor_waits_raises_where_it_waits() -> None:
    with pytest.raises(Stopped) as stopped, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert stopped.value.signum == signal.SIGTERM and str(stopped.value) == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone after


def test_findings_print_each_fix_under_its_line_and_only_failures_fail() -> None:
    findings = [Finding("python", OK, "3.11"), Finding("seccomp", WARNING, "no trace", "use native"),
                Finding("partition", FAILURE, "gpu-nope: invalid", "set slurm_partition")]
    text = render_text(findings)
    lines = text.splitlines()
    assert lines[0].startswith("OK") and "fix: use native" in lines[2] and "fix: set slurm_partition" in lines[4]
    assert lines[-1] == "1 ok, 1 warnings, 1 failures"
    assert exit_status(findings) == 1 and exit_status(findings[:2]) == 0
    # one by one, as they are made, in the columns of the longest check's name
    streamed = [render_finding(f) for f in findings]
    assert streamed[0] == f"OK       {'python':<{CHECK_WIDTH}}  3.11"
    assert streamed[1].splitlines()[1] == f"{'':<8} {'':<{CHECK_WIDTH}}  fix: use native"
    assert render_counts(findings) == lines[-1]
    with pytest.raises(ValueError, match="status 'bad'"):
        Finding("x", "bad", "")


def test_the_node_report_is_read_back_from_the_job_steps_output() -> None:
    report = NodeReport("n7", [Finding("node gpus", OK, "4"), Finding("node scratch", "failure", "full", "free it")])
    assert report.line().startswith(MARKER)
    assert read_node_report(f"srun: job 5 queued\n{report.line()}\n") == report
    assert read_node_report("srun: error: invalid partition specified: gpu-nope\n") is None
    # a line that is not a report is named, never read as findings
    finding = {"check": "node gpus", "status": "ok", "detail": "4", "fix": ""}
    for data, said in (({"host": "n7", "findings": [{**finding, "status": "fine"}]}, "status 'fine' is not one of"),
                       ({"host": "n7", "findings": [{**finding, "detail": 4}]}, r"findings\[0\]: detail is int"),
                       ({"host": "n7"}, "missing findings")):
        with pytest.raises(WireError, match=f"^the node's report line: .*{said}"):
            read_node_report(MARKER + json.dumps(data) + "\n")
    with pytest.raises(WireError, match="^the node's report line is not valid JSON"):
        read_node_report(MARKER + "{'host'\n")


def test_the_nodes_gpus_against_the_profile_where_no_driver_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # with nvidia-smi the driver's list is checked too: run on an H200 (docs/measurements.md, "hvdflow doctor")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi on these machines
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    fewer = gpus(2)
    assert fewer.status == FAILURE and "Slurm gave 1 GPUs (CUDA_VISIBLE_DEVICES=0)" in fewer.detail, fewer
    assert "gpus_per_node" in fewer.fix
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    unchecked = gpus(2)
    assert unchecked.status == WARNING and "no nvidia-smi, so the driver is not checked" in unchecked.detail, unchecked
    assert gpus(0).status == OK


def test_an_installed_hvdflows_pins_are_its_runtime_dependencies_not_its_test_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the README's venv (`pip install -c requirements/constraints.txt .`) has no pytest: doctor must not ask for it
    import importlib.metadata

    from hvdflow.doctor import host

    monkeypatch.setattr(host, "PYPROJECT", tmp_path / "no-pyproject.toml")
    monkeypatch.setattr(importlib.metadata, "requires", lambda name: [
        "snakemake==9.27.1", "PyYAML==6.0.3", 'pytest==9.2.0; extra == "test"', 'h5py==3.16.0 ; extra == "test"'])
    assert host.pinned_requirements() == {"snakemake": "9.27.1", "PyYAML": "6.0.3"}
