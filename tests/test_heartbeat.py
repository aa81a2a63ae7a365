"""Progress lines of long steps (hvdflow.files.heartbeat) and of the rule bodies (pipeline.steps.logged): real
threads and files; the pipeline's own logs are checked in tests/test_pipeline.py."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from hvdflow.files.heartbeat import (
    elapsed_text,
    heartbeat,
    last_line,
    progress_seconds,
    size_text,
    tree_bytes,
)
from hvdflow.images.build.image import BuildProgress
from hvdflow.launch.supervise import note
from hvdflow.pipeline.steps import logged, runtime_setup_detail
from hvdflow.runtime import runtime_settings


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


_COMMAND = ("import time\nfrom hvdflow.files.heartbeat import heartbeat, to_stderr\n"
            "with heartbeat(to_stderr, 'building small', lambda: 'the layers'):\n    time.sleep(2.6)\n"
            "print('after', flush=True)\n")


def test_a_commands_progress_is_one_line_redrawn_on_a_terminal_and_plain_lines_elsewhere() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HVDFLOW_PROGRESS_SECONDS": "1"}
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", _COMMAND], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    drawn = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the command has closed its end of the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(controller)
    assert proc.wait(timeout=30) == 0 and proc.stdout is not None and proc.stdout.read() == b"after\n"
    screen = drawn.decode()
    redraws = screen[:-2].split("\r")[1:]
    assert 1 <= len(redraws) <= 3, screen  # one each second of the 2.6 s
    assert all(part.startswith("[") and "] building small: running for " in part and "; the layers\x1b[K" in part
               for part in redraws), screen
    assert screen.endswith("\x1b[K\r\n"), screen  # the line is left, once, to what follows (the pty adds \r)

    piped = subprocess.run([sys.executable, "-c", _COMMAND], env=env, capture_output=True, text=True, timeout=30)
    lines = piped.stderr.splitlines()
    assert 1 <= len(lines) <= 3 and "\r" not in piped.stderr and "\x1b" not in piped.stderr, piped.stderr
    assert all(line.endswith("] building small: running for 1 s; the layers") or "running for 2 s" in line
               for line in lines), lines


def test_a_builds_progress_names_its_phase_and_the_debian_packages_installed_so_far(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    progress = BuildProgress()
    progress.enter("the root filesystem: Debian's packages (mmdebstrap), then the wheels (pip)", log)
    assert progress.text(log) == "the root filesystem: Debian's packages (mmdebstrap), then the wheels (pip)"
    progress.rootfs, progress.packages = tmp_path / "rootfs", 187
    info = progress.rootfs / "var" / "lib" / "dpkg" / "info"
    info.mkdir(parents=True)
    for name in ("libc6:amd64.list", "base-files.list", "base-files.md5sums"):
        (info / name).write_text("")
    with open(log, "a") as out:
        out.write("I: installing remaining packages inside the chroot...\n")
    assert progress.text(log) == ("the root filesystem: Debian's packages (mmdebstrap), then the wheels (pip); "
                                  "2 of 187 Debian packages installed; "
                                  "I: installing remaining packages inside the chroot...")
    assert log.read_text().startswith("hvdflow: the root filesystem: ")


def test_a_native_steps_progress_is_its_venvs_newest_build_line_only_while_that_log_is_written(tmp_path: Path) -> None:
    record = tmp_path / "hvdflow-cpu.json"
    record.write_text(json.dumps({"image": "hvdflow-cpu"}))
    (tmp_path / "hvdflow-cpu.build.log").write_text("an old build's last line\n")
    udocker = runtime_settings("runtime", {"kind": "udocker"}, "gloo")
    assert runtime_setup_detail(udocker, record) is None
    detail = runtime_setup_detail(runtime_settings("runtime", {"kind": "native", "venv_dir": str(tmp_path)}, "gloo"),
                                  record)
    assert detail is not None and detail() == ""  # an earlier run's log says nothing of this one
    with open(tmp_path / "hvdflow-cpu.build.log", "a") as out:
        out.write("[ 42%] Building CXX object horovod/common/CMakeFiles/operations.cc.o\n")
    assert detail() == "native runtime set-up: [ 42%] Building CXX object horovod/common/CMakeFiles/operations.cc.o"
