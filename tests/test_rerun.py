"""`hvdflow rerun`'s parts that need no training: the profile recreated from a record, the code revision checked
out, the inputs checked, the comparison and its verdict. The reruns themselves: tests/test_pipeline.py."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hvdflow.config.profile import load_profile, profile_settings, recorded_runtime
from hvdflow.errors import ConfigError, RerunRefused
from hvdflow.files.cache import sha256_file
from hvdflow.pipeline.record import jsonable
from hvdflow.rerun import inputs
from hvdflow.rerun.compare import EXIT_DIFFERS, EXIT_IDENTICAL, EXIT_WITHIN_TOLERANCE, compare, table
from hvdflow.rerun.recreate import read_record, recreate
from hvdflow.rerun.worktree import check_out, repository_of
from hvdflow_index import content_sha256

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("profile", ["local", "local-native", "testbed", "slurm", "leonardo"])
def test_the_recorded_profile_loads_back_as_it_was(profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_REGISTRY", "http://127.0.0.1:5999")
    monkeypatch.setenv("HVDFLOW_TESTBED_DIR", "/var/lib/hvdflow-testbed")
    recorded = jsonable(load_profile(REPO / "profiles" / profile / "hvdflow.yaml"))
    path = tmp_path / "hvdflow.yaml"
    path.write_text(yaml.safe_dump(profile_settings(recorded)))
    monkeypatch.delenv("HVDFLOW_REGISTRY")  # the recreated settings hold values, not the variables they came from
    again = jsonable(load_profile(path))
    assert {**again, "path": None} == {**recorded, "path": None}


@pytest.mark.parametrize("profile", ["local", "local-native"])
def test_a_version_1_records_profile_is_written_in_its_own_layout_and_its_runtime_section_recovered(
        profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # record_version 1 held the runtime's keys at the profile's top level, every kind's; a rerun runs the recorded
    # revision's code, which reads that layout, so the settings keep it; hvdflow's own side (loading the recorded
    # image into the recorded store) reads the section from it
    monkeypatch.setenv("HVDFLOW_REGISTRY", "http://127.0.0.1:5999")
    recorded = jsonable(load_profile(REPO / "profiles" / profile / "hvdflow.yaml"))
    section = recorded["runtime"]
    version_1 = {**recorded, "runtime": section["kind"], "udocker_dir": section["udocker_dir"],
                 "execmode": section["options"].get("execmode"), "proot": section["options"].get("proot", "image"),
                 "native_venv_dir": section["options"].get("venv_dir", str(Path.home() / ".cache/hvdflow/native"))}
    settings = profile_settings(version_1)
    assert {k: settings.get(k) for k in ("runtime", "udocker_dir", "proot", "native_venv_dir")} == {
        k: version_1[k] for k in ("runtime", "udocker_dir", "proot", "native_venv_dir")}
    assert settings.get("execmode") == version_1["execmode"]
    # this hvdflow's loader refuses that layout by name; the recorded revision's reads it
    path = tmp_path / "hvdflow.yaml"
    path.write_text(yaml.safe_dump(settings))
    with pytest.raises(ConfigError, match="the runtime's keys are now one section"):
        load_profile(path)
    assert recorded_runtime(version_1) == {"kind": section["kind"], "udocker_dir": section["udocker_dir"],
                                           **{k: v for k, v in section["options"].items() if v is not None}}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit of a.py."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.py").write_text("x = 1\n")
    _git(root, "add", "a.py")
    _git(root, "commit", "-q", "-m", "one")
    return root


def _code(repo: Path) -> dict[str, Any]:
    from hvdflow.pipeline.record import _git_revision

    return _git_revision(repo)


def test_a_clean_record_is_checked_out_at_its_commit(repo: Path, tmp_path: Path) -> None:
    code = _code(repo)
    (repo / "a.py").write_text("x = 3\n")  # what the checkout holds now does not matter
    checkout = check_out(code, repo, tmp_path / "wt", allow_dirty=False)
    assert (checkout.commit, checkout.diff_applied, checkout.note) == (code["commit"], False, None)
    assert (tmp_path / "wt" / "a.py").read_text() == "x = 1\n"
    with pytest.raises(RerunRefused, match="already exists"):
        check_out(code, repo, tmp_path / "wt", allow_dirty=False)


def test_a_dirty_record_gets_its_changes_while_the_repository_holds_them(repo: Path, tmp_path: Path) -> None:
    (repo / "a.py").write_text("x = 2\n")
    (repo / "b.py").write_text("y = 1\n")
    _git(repo, "add", "b.py")  # a new file, added but not committed, is part of the recorded difference
    code = _code(repo)
    assert code["dirty"] and code["changed_files"] == ["a.py", "b.py"]
    checkout = check_out(code, repo, tmp_path / "wt", allow_dirty=False)
    assert checkout.diff_applied and (tmp_path / "wt" / "a.py").read_text() == "x = 2\n"
    assert (tmp_path / "wt" / "b.py").read_text() == "y = 1\n"
    assert _code(tmp_path / "wt")["diff_sha256"] == code["diff_sha256"]
    (repo / "a.py").write_text("x = 5\n")  # the recorded changes are gone: refused, unless the clean commit will do
    with pytest.raises(RerunRefused, match=rf"uncommitted changes \(diff sha256 {code['diff_sha256']}, files a.py, b.py\)"):
        check_out(code, repo, tmp_path / "wt2", allow_dirty=False)
    assert not (tmp_path / "wt2").exists()
    allowed = check_out(code, repo, tmp_path / "wt3", allow_dirty=True)
    assert not allowed.diff_applied and "a.py" in str(allowed.note)
    assert (tmp_path / "wt3" / "a.py").read_text() == "x = 1\n"


def test_an_unknown_or_missing_revision_is_refused(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(RerunRefused, match=f"commit {'0' * 40} of the record is not in {repo}"):
        check_out({"commit": "0" * 40, "dirty": False}, repo, tmp_path / "wt", allow_dirty=False)
    with pytest.raises(RerunRefused, match="names no code revision"):
        check_out({"commit": None, "dirty": None}, repo, tmp_path / "wt", allow_dirty=False)
    assert "HEAD" in str(check_out({"commit": None, "dirty": None}, repo, tmp_path / "wt", allow_dirty=True).note)


def _inputs(root: Path) -> dict[str, str]:
    files = {"resources/d/index.json": b"{}", "resources/d/train-00000.tfrecord": b"a" * 100,
             "resources/d/test-00000.tfrecord": b"b" * 10}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return {name: sha256_file(root / name) for name in files}


def test_inputs_are_checked_the_first_that_differs_named_and_copied_index_last(tmp_path: Path) -> None:
    source, target = tmp_path / "run", tmp_path / "rerun"
    recorded = _inputs(source)
    assert inputs.present(recorded, source) and not inputs.present(recorded, tmp_path / "elsewhere")
    inputs.verify(recorded, source)
    inputs.place(recorded, source, target)
    inputs.verify(recorded, target)
    index = (target / "resources/d/index.json").stat().st_mtime_ns
    assert all((target / n).stat().st_mtime_ns <= index for n in recorded)
    shard = source / "resources/d/train-00000.tfrecord"
    shard.write_bytes(b"a" * 99 + b"c")
    expected = recorded[str(shard.relative_to(source))]
    with pytest.raises(RerunRefused, match=rf"{shard}: sha256 {sha256_file(shard)}, but the record says {expected}"):
        inputs.verify(recorded, source)
    shard.unlink()
    with pytest.raises(RerunRefused, match=f"{shard}: an input of the recorded run is missing"):
        inputs.present(recorded, source)


def test_a_dataset_prepared_afresh_is_checked_by_its_content_less_the_timings(tmp_path: Path) -> None:
    recorded = _inputs(tmp_path)
    index_path = tmp_path / "resources/d/index.json"
    index = {"splits": {"train": {"records": 3}}, "preparation": {"chunk_seconds": [1.0]}}
    index_path.write_text(json.dumps(index))
    recorded["resources/d/index.json"] = sha256_file(index_path)
    content = content_sha256(index)
    index_path.write_text(json.dumps({**index, "preparation": {"chunk_seconds": [1.5]}}))
    inputs.verify(recorded, tmp_path, index_content=content)
    with pytest.raises(RerunRefused, match="index.json: sha256 .* but the record says"):
        inputs.verify(recorded, tmp_path)
    index_path.write_text(json.dumps({**index, "splits": {"train": {"records": 4}}}))
    with pytest.raises(RerunRefused, match=f"index.json: content sha256 .*, but the record says {content}"):
        inputs.verify(recorded, tmp_path, index_content=content)


def _record(seed: int = 1234, weights: str = "ab" * 32, losses: tuple[float, ...] = (1.0, 0.5)) -> dict[str, Any]:
    return {
        "record_version": 1, "experiment": "demo", "weights_sha256": weights, "seeds": {"training": seed, "split": 42},
        "history": [{"epoch": float(i), "loss": loss, "accuracy": 0.9 + i / 100} for i, loss in enumerate(losses)],
        "versions": {"tensorflow": "2.15.1"}, "numerics": {"onednn_enabled": False},
        "machines": {"vm": {"cpu": {"model": "AMD EPYC", "flags": ["avx2", "fma"]}, "gpus": []}},
        "image": {"digest": "sha256:" + "cd" * 32}, "code": {"commit": "1" * 40, "dirty": False},
        "ranks": [{"threads": 1}, {"threads": 1}],
    }


def test_identical_runs_compare_identical() -> None:
    comparison = compare(_record(), _record())
    assert comparison.exit_status == EXIT_IDENTICAL and comparison.differing() == []
    assert "verdict: identical" in table(comparison)


def test_a_changed_seed_names_the_rows_that_differ() -> None:
    comparison = compare(_record(), _record(seed=1235, weights="ef" * 32, losses=(1.0, 0.4)))
    assert comparison.exit_status == EXIT_DIFFERS
    assert comparison.differing("result") == ["weights_sha256", "final loss", "loss epoch 2"]
    assert comparison.differing("context") == ["seeds.training"]
    text = table(comparison)
    assert "! weights_sha256" in text and "! seeds.training" in text and "  loss epoch 1" in text
    assert "differing results: weights_sha256, final loss, loss epoch 2" in text


def test_other_weights_with_metrics_within_tolerance_and_other_cpu_flags_are_told_apart() -> None:
    other = _record(weights="ef" * 32, losses=(1.0, 0.505))
    other["machines"] = {"node7": {"cpu": {"model": "Intel Xeon", "flags": ["avx2", "fma", "avx512_vnni"]}, "gpus": []}}
    other["numerics"] = {"onednn_enabled": True}
    comparison = compare(_record(), other, tolerance=0.01)
    assert comparison.exit_status == EXIT_WITHIN_TOLERANCE
    assert {"cpu model", "cpu flags", "numerics.onednn_enabled"} <= set(comparison.differing("context"))
    assert "only here: avx512_vnni" in table(comparison)
    assert compare(_record(), other, tolerance=0.001).exit_status == EXIT_DIFFERS


def test_a_run_recorded_as_not_deterministic_agrees_when_its_metrics_do() -> None:
    recorded = {**_record(), "config": {"experiment": {"deterministic": False}}}
    other = _record(weights="ef" * 32, losses=(1.0, 0.505))
    comparison = compare(recorded, other, tolerance=0.01)
    assert comparison.exit_status == EXIT_IDENTICAL and comparison.differing("result") == ["weights_sha256", "final loss",
                                                                                            "loss epoch 2"]
    assert "the weights may differ, as the run had deterministic: false" in comparison.verdict
    assert compare(recorded, other, tolerance=0.001).exit_status == EXIT_DIFFERS


def test_a_record_it_cannot_rerun_is_named(tmp_path: Path) -> None:
    old = tmp_path / "run.json"
    old.write_text(json.dumps({"experiment": "demo", "profile": "ClusterProfile(...)"}))
    with pytest.raises(RerunRefused, match=f"{old}: record_version None"):
        read_record(old)
    partial = copy.deepcopy(_record())
    old.write_text(json.dumps(partial))
    with pytest.raises(RerunRefused, match="has no config, profile, inputs_sha256"):
        read_record(old)


def test_the_recreated_settings_pin_the_recorded_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_REGISTRY", "http://127.0.0.1:5999")
    root = tmp_path / "wt"
    (root / "profiles" / "local").mkdir(parents=True)
    (root / "profiles" / "local" / "config.yaml").write_text((REPO / "profiles/local/config.yaml").read_text())
    record = {**_record(), "config": {"catalog": "containers/catalog.yaml", "lock": "containers/images.lock.yaml",
                                      "dataset": {"source": "sklearn-digits", "seed": 42},
                                      "experiment": {"dataset": "digits", "seed": 7}},
              "profile": {**jsonable(load_profile(REPO / "profiles/local/hvdflow.yaml")), "path": "profiles/local/hvdflow.yaml"},
              "image": {"name": "hvdflow-cpu", "reference": "hvdflow/hvdflow-cpu:t", "digest": "sha256:" + "cd" * 32}}
    settings = recreate(record, root, registry="http://10.0.0.1:5000/")
    config = yaml.safe_load((root / settings.experiment_config).read_text())
    assert config["experiments"] == {"demo": {"dataset": "digits", "seed": 7}} and "digits" in config["datasets"]
    profile = yaml.safe_load((root / settings.snakemake_profile / "config.yaml").read_text())
    assert profile["config"] == ["hvdflow_profile=rerun/hvdflow.yaml"] and profile["cores"] == 2
    assert load_profile(root / "rerun" / "hvdflow.yaml").registry == "http://10.0.0.1:5000"
    lock = yaml.safe_load((root / settings.lock).read_text())
    assert lock["images"]["hvdflow-cpu"] == {"reference": "hvdflow/hvdflow-cpu:t", "digest": "sha256:" + "cd" * 32}
    record["profile"]["path"] = "profiles/gone/hvdflow.yaml"
    with pytest.raises(RerunRefused, match="profiles/gone/config.yaml cannot be read"):
        recreate(record, root, registry=None)


def test_a_record_outside_a_checkout_names_the_commit_it_looked_for_and_repo(tmp_path: Path) -> None:
    with pytest.raises(RerunRefused, match=rf"^{tmp_path} is not in a git checkout: looked there for the checkout the "
                                           rf"run was made in, which holds commit {'a' * 40} \(two folders above "
                                           rf"results/<experiment>/run.json\); pass --repo with a clone of hvdflow "
                                           rf"that has that commit"):
        repository_of(tmp_path, "a" * 40)
