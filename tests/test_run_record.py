"""The run record's parts that need no training: JSON values, the code's revision, the epochs' metrics, the schema."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hvdflow.config.profile import load_profile
from hvdflow.launch.image_check import ImageCheck, Needs, judge
from hvdflow.pipeline.record import _git_revision, epoch_metrics, jsonable, run_record
from hvdflow.pipeline.record_page import record_page
from hvdflow_wire.rank import RankResult
from pipeline_run import check_run_record
from rank_results import rank_result
from test_image_check import GOOD

REPO = Path(__file__).resolve().parent.parent
SHA = "ab" * 32


def test_a_profile_becomes_json_all_the_way_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_REGISTRY", "http://127.0.0.1:5999")
    profile = jsonable(load_profile(REPO / "profiles" / "testbed" / "hvdflow.yaml"))
    assert json.loads(json.dumps(profile)) == profile
    assert profile["slurm"]["scratch_dir"] == "/var/lib/hvdflow-testbed/scratch"
    assert profile["slurm"]["srun_extra"] == [] and profile["slurm"]["gpus_per_node"] == 4


def test_the_revision_names_a_dirty_tree_and_the_sha256_of_its_diff(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    clean = _git_revision(tmp_path)
    assert (clean["dirty"], clean["changed_files"], clean["diff_sha256"]) == (False, [], None)
    (tmp_path / "a.py").write_text("x = 2\n")
    dirty = _git_revision(tmp_path)
    assert dirty["dirty"] and dirty["changed_files"] == ["a.py"] and len(dirty["diff_sha256"]) == 64
    assert _git_revision(tmp_path)["diff_sha256"] == dirty["diff_sha256"]  # the same change, the same sum
    (tmp_path / "a.py").write_text("x = 3\n")
    assert _git_revision(tmp_path)["diff_sha256"] != dirty["diff_sha256"]
    plain = tmp_path.parent / f"{tmp_path.name}-plain"
    plain.mkdir()
    assert _git_revision(plain)["commit"] is None and "is not a git checkout" in _git_revision(plain)["note"]


def test_epoch_metrics_are_read_from_the_history_as_numbers(tmp_path: Path) -> None:
    history = tmp_path / "history.csv"
    history.write_text("epoch,accuracy,loss\n0,0.5,1.25\n1,0.75,\n")
    assert epoch_metrics(history) == [{"epoch": 0.0, "accuracy": 0.5, "loss": 1.25}, {"epoch": 1.0, "accuracy": 0.75}]
    assert epoch_metrics(tmp_path / "missing.csv") == []


def _rank(rank: int) -> RankResult:
    return rank_result(rank, weights_sha256=SHA)


def _local_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The record of a 2-rank run on this machine, made from files as a run leaves them (no training)."""
    monkeypatch.setenv("HVDFLOW_REGISTRY", "http://127.0.0.1:5999")
    profile = load_profile(REPO / "profiles" / "local" / "hvdflow.yaml")
    image = tmp_path / "image.json"
    image.write_text(json.dumps({"image": "hvdflow-cpu", "reference": "hvdflow/hvdflow-cpu:t", "registry": "r",
                                 "digest": "sha256:" + SHA, "container": "c", "execmode": "P1",
                                 "udocker_dir": str(tmp_path / "udocker")}))
    check = ImageCheck("sha256:" + SHA, GOOD, judge(GOOD, Needs(train=True, launcher="gloo")))
    (tmp_path / "image.check.json").write_text(json.dumps(check.to_json()))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "s0.tfrecord").write_bytes(b"x")
    index = tmp_path / "data" / "index.json"
    index.write_text(json.dumps({"splits": {"train": {"shards": [{"file": "s0.tfrecord"}]}}}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "history.csv").write_text("epoch,loss\n0,1.0\n")
    (out / "model").mkdir()
    (out / "model" / "model.keras").write_bytes(b"a model")
    spec = {"dataset": "d", "seed": 1, "epochs": 1}
    config = {"datasets": {"d": {"source": "sklearn-digits", "seed": 2}}, "catalog": "containers/catalog.yaml",
              "lock": "containers/images.lock.yaml"}
    record = run_record("e", spec, config, profile, image, index, out, tmp_path / "logs", [_rank(0), _rank(1)], 0.0, 1.0)
    record["attempts"] = [{"attempt": 1, "slurm_job_id": None, "slurm_restart_count": None, "host": "h",
                           "start_unix": 0.0, "plan": "p", "from": "the start", "outcome": "completed"}]
    return record


def test_a_record_of_a_local_run_matches_the_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _local_record(tmp_path, monkeypatch)
    # the profile asked for the image's proot, which this container (there is none) does not carry: named, not hidden
    assert record["proot"]["binary"] is None and "carries no proot" in record["proot"]["note"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    assert check_run_record(path)["history"] == [{"epoch": 0.0, "loss": 1.0}]
    assert record["profile"]["runtime"]["options"] == {"execmode": "auto", "proot": "image"}
    record["profile"]["runtime"]["execmode"] = "P1"  # the section's shape of record_version 1, in a version 2 record
    path.write_text(json.dumps(record))
    with pytest.raises(AssertionError, match="profile/runtime: .*'execmode' was unexpected"):
        check_run_record(path)


def test_the_report_page_shows_the_record_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = _local_record(tmp_path, monkeypatch)
    record["experiment"] = "<b>e</b>"
    page = record_page(record)
    assert f"hvdflow/hvdflow-cpu:t@sha256:{SHA}" in page and "<b>e</b>" not in page and "&lt;b&gt;e&lt;/b&gt;" in page
    assert "Slurm</th><td>none: this machine" in page and "1 flags: avx2" in page
    # two ranks, one host, their use of it, their steps, two epochs' step times, an attempt
    assert page.count("<tr><td>") == 2 + 1 + 2 + 2 + 2 + 1
    assert "<tr><td>0</td><td>4</td><td>225.0</td><td>11 %</td><td>67 %</td><td>22 %</td></tr>" in page
    assert "<td>80 %</td><td>612 MiB</td><td>no NVIDIA driver on h</td><td>12.5</td><td>2 every 5.0 s</td>" in page
    assert "<td>1</td><td>h</td><td>4</td><td>0.060</td><td>0.450</td><td>0.150</td>" in page
    assert "<th>verdict</th><td>compute-bound: 68 % of step time computing" in page
    record["record_version"] = 2  # a record made before ranks[].usage and ranks[].step_times
    for rank in record["ranks"]:
        del rank["usage"], rank["step_times"]
    page = record_page(record)
    assert "<td>1</td><td>h</td><td>not sampled</td>" in page and "made before hvdflow measured its steps" in page
