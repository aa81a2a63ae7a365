"""Progress lines of long steps (hvdflow.files.heartbeat) and of the rule bodies (pipeline.steps.logged): real
threads and files; the pipeline's own logs are checked in tests/test_pipeline.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hvdflow.files.heartbeat import (
    elapsed_text,
    heartbeat,
    last_line,
    progress_seconds,
    size_text,
    tree_bytes,
)
from hvdflow.launch.supervise import note
from hvdflow.pipeline.steps import logged


def test_a_long_block_gets_lines_with_its_time_and_detail_and_none_after_it(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    counter = iter(range(100))
    with heartbeat(lambda line: note(log, line), "pulling tiny", lambda: f"{next(counter)} layers", every=0.2):
        time.sleep(0.9)
    lines = log.read_text().splitlines()
    assert 1 <= len(lines) <= 4, lines  # one each 0.2 s of the 0.9 s (fewer on a busy machine, never more)
    assert all("] pulling tiny: running for 0 s; " in line for line in lines), lines
    assert [line.split("; ")[1] for line in lines] == [f"{n} layers" for n in range(len(lines))]
    time.sleep(0.5)
    assert log.read_text().splitlines() == lines  # the thread ended with the block


def test_a_failing_detail_leaves_the_line_and_the_step_alone(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    with pytest.raises(RuntimeError, match="the step's own"):
        with heartbeat(lambda line: note(log, line), "listing", lambda: str(1 / 0), every=0.1):
            time.sleep(0.35)
            raise RuntimeError("the step's own error")
    assert log.read_text().splitlines() and all(line.endswith("listing: running for 0 s")
                                               for line in log.read_text().splitlines())


def test_a_rule_bodys_log_gets_progress_between_start_and_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_PROGRESS_SECONDS", "0.2")
    log = tmp_path / "logs" / "prepare_chunk" / "digits-0.log"
    log.parent.mkdir(parents=True)
    log.with_suffix(".run.log").write_text("chunk 0: 10 of 40 samples, 0.1 MB read, 1 s\n\n")
    with logged(log, lambda: last_line(log.with_suffix(".run.log"))):
        time.sleep(0.7)
    lines = log.read_text().splitlines()
    assert lines[0].endswith("] start") and lines[-1].endswith("] done"), lines
    assert any(line.endswith("prepare_chunk digits-0: running for 0 s; chunk 0: 10 of 40 samples, 0.1 MB read, 1 s")
               for line in lines[1:-1]), lines


@pytest.mark.parametrize("value, seconds", [("", 30.0), ("5", 5.0), ("0.5", 0.5), ("0", 30.0), ("x", 30.0)])
def test_the_interval_comes_from_the_environment_or_is_30_s(value: str, seconds: float,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVDFLOW_PROGRESS_SECONDS", value)
    assert progress_seconds() == seconds


def test_times_sizes_trees_and_last_lines_read_as_a_person_would(tmp_path: Path) -> None:
    assert [elapsed_text(s) for s in (5, 65, 3725)] == ["5 s", "1 min 05 s", "1 h 02 min"]
    assert size_text(3 * 1024 ** 2) == "3.0 MiB" and size_text(5 * 1024 ** 3 // 2) == "2.5 GiB"
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"1" * 10)
    (tmp_path / "a" / "b" / "y").write_bytes(b"1" * 32)
    assert tree_bytes(tmp_path / "a") == 42 and tree_bytes(tmp_path / "none") == 0
    (tmp_path / "log").write_text("first\n" + "x" * 5000 + "\nlast line  \n\n")
    assert last_line(tmp_path / "log") == "last line" and last_line(tmp_path / "none") == ""
