"""Supervision stops whole process groups: nothing a launched process started outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from hvdflow.errors import LaunchError, RunStopped
from hvdflow.launch.supervise import (
    ABANDONED,
    StopRelay,
    by_signal,
    exit_text,
    group_members,
    run_one,
    start,
    stop,
    stopped_error,
    supervise,
    watch_stop_signals,
)
from hvdflow.runtime.native.runtime import NativeRuntime
from hvdflow_wire.user_code import USER_CODE_ERROR, USER_CODE_EXIT
from pipeline_run import processes_naming

# a leader that exits on SIGTERM and a child that ignores it, like `udocker run` and Debian's proot
STUBBORN_CHILD = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"],
    stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print("CHILD_PID", child.pid, flush=True)
time.sleep(300)
"""


def _child_pid(log: Path) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("CHILD_PID "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError(f"no child started: {log.read_text()}")


def test_stop_kills_a_child_that_ignores_sigterm_after_its_leader_exited(tmp_path: Path) -> None:
    process = start("stubborn", [sys.executable, "-c", STUBBORN_CHILD], tmp_path / "stubborn.log", {})
    child = _child_pid(tmp_path / "stubborn.log")
    assert child in group_members(process.proc.pid)
    stop([process])
    assert process.proc.returncode is not None
    assert group_members(process.proc.pid) == [], "a process of the stopped group is still alive"


def test_a_failure_stops_the_other_groups_entirely(tmp_path: Path) -> None:
    stubborn = start("stubborn", [sys.executable, "-c", STUBBORN_CHILD], tmp_path / "stubborn.log", {})
    _child_pid(tmp_path / "stubborn.log")
    failing = start("failing rank", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "failing.log", {})
    with pytest.raises(LaunchError, match="failing rank failed with exit code 3"):
        supervise([stubborn, failing], timeout=60)
    assert group_members(stubborn.proc.pid) == [] and group_members(failing.proc.pid) == []


def test_the_rank_killed_by_a_signal_is_named_before_a_peer_that_exited_1_after_it(tmp_path: Path) -> None:
    # a rank dies of SIGKILL and its peer fails on the broken connection a moment later: both have exited by the
    # next poll, and the error must name the one that died first, not the first in the list
    peer = start("rank 0", ["sh", "-c", "sleep 0.15; exit 1"], tmp_path / "rank-0.log", {})
    killed = start("rank 1", ["sh", "-c", "sleep 0.1; kill -9 $$"], tmp_path / "rank-1.log", {})
    with pytest.raises(LaunchError, match=r"rank 1 failed with exit code -9"):
        supervise([peer, killed])
    assert group_members(peer.proc.pid) == [] and group_members(killed.proc.pid) == []


# a rank as the trainer behaves: its stop signals ignored by its launcher, it installs its own handlers, then on
# SIGINT or SIGTERM it "checkpoints" and exits with the stopped status
RANK_STOPPING_ON_SIGINT = """
import signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda n, _: (print("got", signal.Signals(n).name, flush=True), sys.exit(75)))
print("ready", flush=True)
time.sleep(300)
"""


# the same rank, slow to start: until it installs its handler it ignores SIGINT, as its launcher set it to
RANK_SLOW_TO_CATCH_SIGINT = "import time; time.sleep(1.5)\n" + RANK_STOPPING_ON_SIGINT


def _wait_ready(tmp_path: Path, ranks: int) -> None:
    """Wait until every rank printed its ready line (the log's first line, the command, holds the word too)."""
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"rank-{r}.log").exists() and "ready" in (tmp_path / f"rank-{r}.log").read_text(
            ).splitlines()[1:] for r in range(ranks)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)


@pytest.fixture
def stand_in_handlers() -> Iterator[None]:
    """SIGINT and SIGHUP handled by a stand-in for Snakemake's (which ends its scheduler), restored afterwards."""
    before = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("rank_code, ready_first", [
    # counted after the ranks started, before the worker thread reached supervise(): the count they started with decides
    (RANK_STOPPING_ON_SIGINT, True),
    # while the trainers still import TensorFlow, ranks ignore SIGINT: it is sent again until they catch it and stop
    (RANK_SLOW_TO_CATCH_SIGINT, False),
], ids=["after-the-start-before-supervise", "before-the-ranks-catch-it"])
def test_a_ctrl_c_before_supervise_runs_reaches_the_ranks(tmp_path: Path, rank_code: str, ready_first: bool,
                                                          stand_in_handlers: None) -> None:
    watch_stop_signals(spawned_job=False)
    ranks = [start(f"rank {r}", [sys.executable, "-c", rank_code], tmp_path / f"rank-{r}.log", {}, rank=True)
             for r in range(2)]
    if ready_first:
        _wait_ready(tmp_path, 2)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # the handler has run in this (the main) thread
    with pytest.raises(RunStopped):
        supervise(ranks, timeout=60)
    assert all("got SIGINT" in (tmp_path / f"rank-{r}.log").read_text() for r in range(2))
    assert all(group_members(r.proc.pid) == [] for r in ranks)


@pytest.mark.parametrize("sent, relayed", [(signal.SIGINT, "SIGINT"), (signal.SIGHUP, "SIGTERM")],
                         ids=["ctrl-c", "hang-up"])
def test_a_stop_signal_in_the_main_thread_reaches_ranks_supervised_in_another_thread(
        tmp_path: Path, sent: signal.Signals, relayed: str, stand_in_handlers: None) -> None:
    # Snakemake runs a rule body in a worker thread and waits for it after a Ctrl-C; the ranks, in sessions of their
    # own, never see the terminal's signals: supervise passes them on, so they checkpoint and stop (a hang-up as
    # SIGTERM, which the trainer catches)
    watch_stop_signals(spawned_job=False)
    ranks = [start(f"rank {r}", [sys.executable, "-c", RANK_STOPPING_ON_SIGINT], tmp_path / f"rank-{r}.log", {},
                   rank=True) for r in range(2)]
    helper = start("rendezvous server", [sys.executable, "-c", "import time; time.sleep(300)"],
                   tmp_path / "server.log", {})
    outcome: list[BaseException] = []

    def body() -> None:
        try:
            supervise(ranks, timeout=120)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=body)
    worker.start()
    _wait_ready(tmp_path, 2)
    os.kill(os.getpid(), sent)
    # the kernel may hand the signal to any thread; CPython runs the handler in the main thread when that thread
    # next runs Python code, so it waits in short slices, as Snakemake's scheduler does (one join(60) blocked the
    # handler for the whole minute in the full suite, whose process has more threads)
    deadline = time.monotonic() + 60
    while worker.is_alive() and time.monotonic() < deadline:
        worker.join(0.1)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RunStopped), outcome
    assert all(f"got {relayed}" in (tmp_path / f"rank-{r}.log").read_text() for r in range(2))
    assert all(group_members(r.proc.pid) == [] for r in ranks)
    assert helper.proc.poll() is None, "a process that is no rank got the rank's stop signal"
    stop([helper])


# a job as Snakemake spawns it for a rule with a run: body: its own Snakemake (here this script) under a shell, which
# a SIGTERM to Snakemake's process group ends; Snakemake's SIGTERM handler (finish the running jobs) kept this process
SPAWNED_JOB = """
import signal, sys
from pathlib import Path
from hvdflow.errors import RunStopped
from hvdflow.launch.supervise import start, supervise, watch_stop_signals
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM: finishing the running jobs", flush=True))
watch_stop_signals(spawned_job=True)
logs = Path(sys.argv[1])
ranks = [start(f"rank {r}", [sys.executable, "-c", sys.argv[2]], logs / f"rank-{r}.log", {}, rank=True)
         for r in range(2)]
try:
    supervise(ranks, timeout=120)
    print("the training went on to its end", flush=True)
except RunStopped as exc:
    print("RunStopped:", exc, flush=True)
"""


def test_a_spawned_job_whose_snakemake_gave_it_up_stops_its_ranks_at_a_checkpoint(tmp_path: Path) -> None:
    job_log = tmp_path / "job.log"
    shell = subprocess.Popen(["sh", "-c", '"$0" -c "$1" "$2" "$3" > "$4" 2>&1; echo the shell waited',
                              sys.executable, SPAWNED_JOB, str(tmp_path), RANK_STOPPING_ON_SIGINT, str(job_log)],
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
                             start_new_session=True)
    _wait_ready(tmp_path, 2)
    os.killpg(shell.pid, signal.SIGTERM)  # the whole group: the shell dies of it, the job's handler keeps it
    assert shell.wait(10) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while processes_naming(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_naming(tmp_path) == [], "the job or a rank outlived its Snakemake"
    output = job_log.read_text()
    assert "SIGTERM: finishing the running jobs" in output and "RunStopped: rank 0, rank 1 stopped on a signal after " \
        "a checkpoint (exit status 75), sent them because the Snakemake that started this job had gone" in output, output
    assert all("got SIGTERM" in (tmp_path / f"rank-{r}.log").read_text() for r in range(2))


# Snakemake as it spawns a job: this Python running the job's command line through a shell, which waits for it
SNAKEMAKE_STAND_IN = "import subprocess, sys; subprocess.run(sys.argv[1:])"
RANK_ENDING_ON_ITS_OWN = "print('ready', flush=True); import time; time.sleep(4)"


@pytest.mark.parametrize("killed", ["snakemake", "snakemakes-parent"])
def test_a_spawned_job_stops_its_ranks_when_its_snakemake_is_killed_alone_but_not_when_snakemake_is_adopted(
        tmp_path: Path, killed: str) -> None:
    job_log = tmp_path / "job.log"
    rank_code = RANK_STOPPING_ON_SIGINT if killed == "snakemake" else RANK_ENDING_ON_ITS_OWN
    job = ["sh", "-c", '"$0" -c "$1" "$2" "$3" > "$4" 2>&1; echo the shell waited', sys.executable, SPAWNED_JOB,
           str(tmp_path), rank_code, str(job_log)]
    # snakemakes-parent: a shell that started Snakemake in the background and ended (a terminal closed under nohup)
    outer = subprocess.Popen(["sh", "-c", '"$@" & echo $! > "$0.pid"; wait', str(tmp_path / "snakemake"),
                              sys.executable, "-c", SNAKEMAKE_STAND_IN, *job],
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
                             start_new_session=True)
    _wait_ready(tmp_path, 2)
    snakemake = int((tmp_path / "snakemake.pid").read_text())
    os.kill(snakemake if killed == "snakemake" else outer.pid, signal.SIGKILL)
    outer.wait(10)
    deadline = time.monotonic() + 30
    while processes_naming(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_naming(tmp_path) == [], "the job or a rank outlived its Snakemake"
    output = job_log.read_text()
    if killed == "snakemake":
        assert "RunStopped: rank 0, rank 1 stopped on a signal after a checkpoint (exit status 75), sent them because " \
            "the Snakemake that started this job had gone (killed" in output, output
        assert all("got SIGTERM" in (tmp_path / f"rank-{r}.log").read_text() for r in range(2))
    else:  # the adopted Snakemake still watched its job: it trained to its end
        assert output.strip() == "the training went on to its end", output


@pytest.mark.parametrize("code, text", [(3, "exit code 3"), (-9, "exit code -9 (SIGKILL)"),
                                        (137, "exit code 137 (SIGKILL)"), (139, "exit code 139 (SIGSEGV)"),
                                        (128, "exit code 128"), (255, "exit code 255")])
def test_an_exit_status_names_the_signal_it_means(code: int, text: str) -> None:
    assert exit_text(code) == text
    assert by_signal(code) == ("SIG" in text)


def test_a_stopped_run_says_why_its_ranks_were_asked_to_stop_where_no_signal_reached_the_launcher() -> None:
    # the fixed and the elastic launchers both raise this error (supervise, elastic.finish)
    relay = StopRelay(0)
    assert str(stopped_error("the elastic run's ranks", relay, "Logs: /l")) == (
        "the elastic run's ranks stopped on a signal after a checkpoint (exit status 75); starting the job again "
        "resumes the run. Logs: /l")
    relay.why = ABANDONED
    assert str(stopped_error("rank 0", relay, "Log: /l/rank-0.log")) == (
        f"rank 0 stopped on a signal after a checkpoint (exit status 75), sent them because {ABANDONED}; starting the "
        "job again resumes the run. Log: /l/rank-0.log")


def test_a_step_that_fails_in_the_users_code_carries_the_users_error_into_the_rules_log(tmp_path: Path) -> None:
    """A reader returning int64 fails the listing in the user's terms: the error the step's own log ends with comes
    back in the LaunchError the rule writes to its log, not only the step log's name."""
    said = "npy_labels:read returned int64 for item 0.npy; supported: uint8, uint16, float32"
    code = f"print('reading'); print({USER_CODE_ERROR + said!r}, flush=True); raise SystemExit({USER_CODE_EXIT})"
    log = tmp_path / "list.log"
    with pytest.raises(LaunchError) as raised:
        run_one(NativeRuntime(Path(sys.executable)), ["python3", "-c", code], [], log, 60, "listing the dataset")
    assert str(log) in str(raised.value) and f"the error in your code: {said}" in str(raised.value), raised.value
    with pytest.raises(LaunchError) as plain:  # a failure that is not the user's code says what it said before
        run_one(NativeRuntime(Path(sys.executable)), ["python3", "-c", "raise SystemExit(4)"], [], log, 60, "listing")
    assert "the error in your code" not in str(plain.value)
