"""What a new training attempt does with the run's checkpoint folder: resume, fall back, refuse, or move aside.

The folders are built as the trainer writes them (checkpoint files, then the manifest naming them with their sha256);
the training itself, with real checkpoints, is tested in test_pipeline.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hvdflow.errors import LaunchError
from hvdflow.pipeline.resume import (
    KILLED,
    begin_attempt,
    describe_attempts,
    end_attempt,
    identity_of,
    load_attempts,
    prepare_checkpoint_folder,
)
from hvdflow_runstate import (
    FORMAT,
    MANIFEST,
    CheckpointError,
    durable_write_json,
    new_manifest,
    read_manifest,
    sha256_file,
)
from rank_results import rank_result_json

SPEC = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": 2, "learning_rate": 0.01, "epochs": 10,
        "checkpoint_every": 1, "keep_checkpoints": 2, "resume": "auto"}


@pytest.fixture()
def index(tmp_path: Path) -> Path:
    path = tmp_path / "index.json"
    path.write_text('{"splits": {}}')
    return path


def _checkpoint(folder: Path, manifest: dict, epoch: int, step: int, steps: int = 20) -> dict:  # type: ignore[type-arg]
    """Write one checkpoint's files and the manifest entry naming them, as RunCheckpoints.save does."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"ckpt-{epoch * steps + step}"
    files = {}
    for suffix in (".index", ".data-00000-of-00001"):
        (folder / (name + suffix)).write_bytes(f"{name}{suffix}".encode() * 100)
        files[name + suffix] = sha256_file(str(folder / (name + suffix)))
    entry = {"name": name, "epoch": epoch, "step": step, "global_step": epoch * steps + step, "files": files,
             "state": {"history": []}, "reason": "epoch end"}
    manifest["checkpoints"].append(entry)
    durable_write_json(str(folder / MANIFEST), manifest)
    return entry


def _run(folder: Path, index: Path, *positions: tuple[int, int], spec: dict = SPEC) -> dict:  # type: ignore[type-arg]
    manifest = new_manifest(identity_of(spec, "sha256:aaa", index))
    for epoch, step in positions:
        _checkpoint(folder, manifest, epoch, step)
    return manifest


def test_run_settings_are_not_part_of_the_identity(index: Path) -> None:
    changed = {**SPEC, "checkpoint_every": 5, "keep_checkpoints": 4, "resume": "never"}
    assert identity_of(changed, "sha256:aaa", index) == identity_of(SPEC, "sha256:aaa", index)
    assert identity_of({**SPEC, "epochs": 11}, "sha256:aaa", index) != identity_of(SPEC, "sha256:aaa", index)


def test_no_folder_starts_from_scratch(tmp_path: Path, index: Path) -> None:
    plan = prepare_checkpoint_folder(tmp_path / "checkpoints", identity_of(SPEC, "sha256:aaa", index), "auto")
    assert plan.text == "starting from scratch (no checkpoint)" and plan.start == "the start"


def test_the_same_run_resumes_from_its_newest_checkpoint(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    _run(folder, index, (3, 0), (3, 7))
    plan = prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "auto")
    assert plan.text == f"resuming from {folder / 'ckpt-67'} at epoch 3 step 7"
    assert plan.start == "epoch 3 step 7"


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_torn_or_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, index: Path,
                                                                            damage: str) -> None:
    folder = tmp_path / "checkpoints"
    _run(folder, index, (3, 0), (3, 7))
    data = folder / "ckpt-67.data-00000-of-00001"
    if damage == "missing":  # the manifest was written, the data file is gone (a torn copy, a lost file)
        data.unlink()
    else:
        data.write_bytes(b"x" + data.read_bytes()[1:])
    plan = prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "auto")
    problem = "is missing" if damage == "missing" else "does not match its sha256"
    assert f"checkpoint ckpt-67 (epoch 3, step 7) is not sound: {data.name} {problem}; falling back" in plan.text
    assert plan.text.endswith(f"resuming from {folder / 'ckpt-60'} at epoch 3 step 0")
    assert plan.start == "epoch 3 step 0"


def test_files_written_after_the_last_manifest_are_not_trusted(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    manifest = _run(folder, index, (3, 0))
    (folder / "ckpt-67.index").write_text("written, but the manifest never named it")
    assert read_manifest(str(folder)) == manifest
    plan = prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "auto")
    assert plan.start == "epoch 3 step 0"


def test_no_sound_checkpoint_is_a_clear_error_and_nothing_is_removed(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    _run(folder, index, (3, 0))
    (folder / "ckpt-60.index").write_text("garbage")
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(LaunchError, match="none of the checkpoints its manifest names is sound .*ckpt-60.index does "
                                          "not match its sha256.*resume: never"):
        prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "auto")
    assert sorted(p.name for p in folder.iterdir()) == before


def test_another_configuration_is_refused_naming_every_difference(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    _run(folder, index, (2, 0))
    other = identity_of({**SPEC, "learning_rate": 0.02}, "sha256:bbb", index)
    with pytest.raises(LaunchError) as refused:
        prepare_checkpoint_folder(folder, other, "auto")
    message = str(refused.value)
    assert "experiment key learning_rate: 0.01 -> 0.02" in message
    assert "image digest: sha256:aaa -> sha256:bbb" in message
    assert "dataset" not in message.split("another configuration")[1].split("Restore")[0]
    assert "resume: never" in message
    assert (folder / "ckpt-40.index").exists()


def test_another_dataset_is_named(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    _run(folder, index, (2, 0))
    index.write_text('{"splits": {"train": []}}')
    with pytest.raises(LaunchError, match="dataset index sha256: [0-9a-f]{64} -> [0-9a-f]{64}"):
        prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "auto")


@pytest.mark.parametrize("case", ["never", "finished", "no manifest"])
def test_starting_over_moves_the_old_checkpoints_aside(tmp_path: Path, index: Path, case: str) -> None:
    folder = tmp_path / "checkpoints"
    manifest = _run(folder, index, (2, 0))
    if case == "finished":
        manifest["finished"] = True
        durable_write_json(str(folder / MANIFEST), manifest)
    elif case == "no manifest":
        (folder / MANIFEST).unlink()
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    plan = prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "never" if case == "never" else "auto")
    assert plan.start == "the start"
    assert not folder.exists()
    [moved] = list((tmp_path / "checkpoints.previous").iterdir())
    assert f"moved to {moved}" in plan.text
    assert {p.name: p.read_bytes() for p in moved.iterdir()} == before


def test_a_run_stopped_before_its_first_checkpoint_keeps_its_attempts(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    identity = identity_of(SPEC, "sha256:aaa", index)
    begin_attempt(folder, prepare_checkpoint_folder(folder, identity, "auto"))
    plan = prepare_checkpoint_folder(folder, identity, "auto")
    assert plan.text == "starting from scratch (the run stopped before its first checkpoint)"
    assert [p.name for p in folder.iterdir()] == ["attempts.json"] and not (tmp_path / "checkpoints.previous").exists()


def test_an_unreadable_manifest_is_named(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / MANIFEST).write_text('{"format": "hvdflow-checkpo')
    with pytest.raises(LaunchError, match=f"{folder / MANIFEST} is not valid JSON"):
        prepare_checkpoint_folder(folder, identity_of(SPEC, "sha256:aaa", index), "auto")
    (folder / MANIFEST).write_text('{"format": "something-else"}')
    with pytest.raises(CheckpointError, match=f"format 'something-else', expected '{FORMAT}'"):
        read_manifest(str(folder))


def test_durable_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    durable_write_json(str(tmp_path / "m.json"), {"a": 1})
    durable_write_json(str(tmp_path / "m.json"), {"a": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 2}


def test_attempts_are_recorded_and_a_silent_death_is_named(tmp_path: Path, index: Path) -> None:
    folder = tmp_path / "checkpoints"
    identity = identity_of(SPEC, "sha256:aaa", index)
    begin_attempt(folder, prepare_checkpoint_folder(folder, identity, "auto"))  # then killed: never ended
    manifest = new_manifest(identity)
    _checkpoint(folder, manifest, 1, 0)
    attempts = begin_attempt(folder, prepare_checkpoint_folder(folder, identity, "auto"))
    assert attempts[0]["outcome"] == KILLED
    end_attempt(folder, "failed", "rank 1 failed with exit code -9\nmore")
    [first, second] = load_attempts(folder)
    assert (first["attempt"], first["from"], first["to"]) == (1, "the start", "epoch 1 step 0")  # its checkpoint
    assert (second["attempt"], second["from"], second["to"], second["outcome"]) == (2, "epoch 1 step 0", "epoch 1 step 0",
                                                                                      "failed")
    assert second["error"] == "rank 1 failed with exit code -9"
    host = first["host"]
    assert describe_attempts([first, second]) == [
        f"attempt 1 ({host}): the start -> epoch 1 step 0: {KILLED}",
        f"attempt 2 ({host}): epoch 1 step 0 -> epoch 1 step 0: failed (rank 1 failed with exit code -9)"]


def test_a_rank_that_exits_0_before_the_last_epoch_is_a_failure(tmp_path: Path) -> None:
    from hvdflow.pipeline.stages import collect_rank_results

    for rank, epochs in ((0, 10), (1, 7)):
        (tmp_path / f"rank-{rank}.json").write_text(json.dumps(rank_result_json(rank, weights_sha256="a",
                                                                                epochs_done=epochs)))
    with pytest.raises(LaunchError, match=f"rank 1 exited 0 after 7 of 10 epochs \\({tmp_path / 'rank-1.json'}\\)"):
        collect_rank_results(tmp_path, 2, 10)
    (tmp_path / "rank-1.json").write_text(json.dumps(rank_result_json(1, weights_sha256="a", epochs_done=10)))
    assert len(collect_rank_results(tmp_path, 2, 10)) == 2


def test_ranks_killed_after_a_signal_checkpoint_of_this_attempt_stopped_after_a_checkpoint(tmp_path: Path) -> None:
    from hvdflow.errors import RunStopped
    from hvdflow.pipeline.resume import stopped_after_signal_checkpoint
    from hvdflow_runstate import MANIFEST, new_manifest

    failure = LaunchError("training: rank 0 on n1 failed first (killed by signal 9); the job step was stopped")
    assert stopped_after_signal_checkpoint(tmp_path, 100.0, failure) is None  # no manifest
    manifest = new_manifest({})

    def newest(reason: str, unix: float) -> None:
        manifest["checkpoints"] = [{"name": "ckpt-11", "reason": reason, "unix": unix}]
        (tmp_path / MANIFEST).write_text(json.dumps(manifest))

    newest("signal SIGTERM", 150.0)
    stopped = stopped_after_signal_checkpoint(tmp_path, 100.0, failure)
    assert isinstance(stopped, RunStopped) and "ckpt-11, signal SIGTERM); then training: rank 0" in str(stopped)
    assert stopped_after_signal_checkpoint(tmp_path, 200.0, failure) is None  # saved by an earlier attempt
    newest("epoch end", 150.0)
    assert stopped_after_signal_checkpoint(tmp_path, 100.0, failure) is None  # a rank failed mid-training
    newest("signal SIGTERM", 150.0)
    assert stopped_after_signal_checkpoint(tmp_path, 100.0, KeyboardInterrupt()) is None
    already = RunStopped("stopped")
    assert stopped_after_signal_checkpoint(tmp_path, 100.0, already) is already
    (tmp_path / MANIFEST).write_text("{not json")
    assert stopped_after_signal_checkpoint(tmp_path, 100.0, failure) is None


def test_a_launch_that_fails_after_every_rank_finished_and_wrote_its_result_keeps_the_run(tmp_path: Path) -> None:
    # CI, job 851: the time limit's warning killed the tasks of a node whose ranks had finished; the launch failed
    # and the retry trained the whole run again. The training is judged by what it left, checked as for a success.
    from hvdflow.errors import RunStopped
    from hvdflow.pipeline.stages import completed_despite

    checkpoints, failure = tmp_path / "checkpoints", LaunchError("training failed with exit code 138 (SIGUSR1)")
    checkpoints.mkdir()
    manifest = new_manifest({})
    (checkpoints / MANIFEST).write_text(json.dumps(manifest))
    for rank in (0, 1):
        (tmp_path / f"rank-{rank}.json").write_text(json.dumps(rank_result_json(rank, epochs_done=10)))
    assert completed_despite(failure, checkpoints, tmp_path, 2, 10) is None  # the manifest says unfinished
    manifest["finished"] = True
    (checkpoints / MANIFEST).write_text(json.dumps(manifest))
    results = completed_despite(failure, checkpoints, tmp_path, 2, 10)
    assert results is not None and [r.rank for r in results] == [0, 1]
    assert completed_despite(failure, checkpoints, tmp_path, None, 10) == results  # elastic: rank 0 says 2 ranks
    for not_a_launch_failure in (RunStopped("stopped"), KeyboardInterrupt()):
        assert completed_despite(not_a_launch_failure, checkpoints, tmp_path, 2, 10) is None
    assert completed_despite(failure, checkpoints, tmp_path, 3, 10) is None  # rank 2 wrote nothing
    (tmp_path / "rank-1.json").write_text(json.dumps(rank_result_json(1, weights_sha256="b" * 64, epochs_done=10)))
    assert completed_despite(failure, checkpoints, tmp_path, 2, 10) is None  # the ranks' weights differ
    (checkpoints / MANIFEST).write_text("{not json")
    assert completed_despite(failure, checkpoints, tmp_path, 2, 10) is None


def test_an_attempt_whose_ranks_all_finished_is_recorded_completed_and_keeps_its_outputs(tmp_path: Path,
                                                                                          index: Path) -> None:
    from hvdflow.pipeline.stages import MODEL, end_failed_attempt

    checkpoints, log = tmp_path / "checkpoints", tmp_path / "train.log"
    begin_attempt(checkpoints, prepare_checkpoint_folder(checkpoints, {}, "auto"))
    (tmp_path / MODEL).mkdir()
    (tmp_path / "metrics.json").write_text("{}")
    for rank in (0, 1):
        (tmp_path / f"rank-{rank}.json").write_text(json.dumps(rank_result_json(rank, epochs_done=10)))
    failure = LaunchError("training failed with exit code 138 (SIGUSR1); the other processes were stopped")
    with pytest.raises(LaunchError) as raised:  # training not finished: a failure, its partial outputs removed
        end_failed_attempt(failure, checkpoints, tmp_path, 2, 10, 0.0, log)
    assert raised.value is failure and not (tmp_path / MODEL).exists() and not (tmp_path / "metrics.json").exists()
    assert load_attempts(checkpoints)[-1]["outcome"] == "failed"
    begin_attempt(checkpoints, prepare_checkpoint_folder(checkpoints, {}, "auto"))
    (tmp_path / MODEL).mkdir()
    (checkpoints / MANIFEST).write_text(json.dumps({**new_manifest({}), "finished": True}))
    results = end_failed_attempt(failure, checkpoints, tmp_path, 2, 10, 0.0, log)
    assert [r.rank for r in results] == [0, 1] and (tmp_path / MODEL).is_dir()
    last = load_attempts(checkpoints)[-1]
    assert last["outcome"] == "completed" and last["error"].endswith("training failed with exit code 138 (SIGUSR1); "
                                                                     "the other processes were stopped")
    assert "warning: every rank finished and wrote its result, then the launch failed" in log.read_text()
