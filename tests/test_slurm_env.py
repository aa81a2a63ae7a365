"""Slurm's task variables mapped to Horovod's placement and to one GPU per local rank; failed-task parsing; the rank
task's signal forwarding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hvdflow.errors import LaunchError
from hvdflow.launch.rank_env import placements
from hvdflow.slurm.env import expand_tasks_per_node, gpu_for_rank, local_size_of, slurm_placement
from hvdflow.slurm.launch import first_failed_rank, srun_failed_task, stopped_after_checkpoint
from hvdflow.slurm.rank_task import exit_reason
from hvdflow.slurm.staging import read_reports, sweep_ended_jobs


@pytest.mark.parametrize("value, counts", [("2", [2]), ("2(x2)", [2, 2]), ("2(x2),1", [2, 2, 1]),
                                           ("3,1(x2)", [3, 1, 1])])
def test_tasks_per_node_are_expanded(value: str, counts: list[int]) -> None:
    assert expand_tasks_per_node(value) == counts


def test_unreadable_tasks_per_node_is_named() -> None:
    with pytest.raises(LaunchError, match=r"cannot read Slurm's tasks per node '2\(y2\)'"):
        expand_tasks_per_node("2(y2)")


def _task(procid: int, nodeid: int, localid: int, per_node: str) -> dict[str, str]:
    return {"SLURM_PROCID": str(procid), "SLURM_NODEID": str(nodeid), "SLURM_LOCALID": str(localid),
            "SLURM_STEP_TASKS_PER_NODE": per_node, "SLURMD_NODENAME": f"n{nodeid + 1}"}


def test_uneven_block_layout_matches_horovods_own_placement() -> None:
    # srun --nodes=2 --ntasks=3: tasks 0,1 on n1 and task 2 on n2
    tasks = [_task(0, 0, 0, "2,1"), _task(1, 0, 1, "2,1"), _task(2, 1, 0, "2,1")]
    assert [slurm_placement(t) for t in tasks] == placements([("n1", 2), ("n2", 1)])


def test_cyclic_layout_keeps_slurms_ranks() -> None:
    # srun --distribution=cyclic over 2 nodes x 2: ranks 0,2 on n1 and 1,3 on n2
    got = slurm_placement(_task(1, 1, 0, "2(x2)"))
    assert (got.rank, got.size, got.local_rank, got.local_size, got.cross_rank, got.cross_size, got.hostname) == \
        (1, 4, 0, 2, 1, 2, "n2")


def test_outside_a_job_step_is_named() -> None:
    with pytest.raises(LaunchError, match=r"\$SLURM_NODEID is not set"):
        slurm_placement({"SLURM_STEP_TASKS_PER_NODE": "2"})


@pytest.mark.parametrize("visible, local_rank, local_size, gpu", [
    ("0,1", 0, 2, "0"), ("0,1", 1, 2, "1"), ("2,3", 1, 2, "3"),   # a list the node's tasks share
    ("0,1,2,3", 2, 3, "2"),                                       # more GPUs than ranks on the node
    ("3", 1, 4, "3"), ("0", 3, 4, "0"), ("1", 0, 1, "1"),         # one device per task: its own
    (None, 0, 2, None), ("", 3, 4, None), ("NoDevFiles", 0, 1, None),  # no GPU
])
def test_each_rank_gets_exactly_its_own_gpu(visible: str | None, local_rank: int, local_size: int,
                                           gpu: str | None) -> None:
    assert gpu_for_rank(visible, local_rank, local_size, "n1") == gpu


@pytest.mark.parametrize("visible, local_rank, local_size", [("0,1", 2, 3), ("0,1", 0, 3)])
def test_more_ranks_than_gpus_on_a_node_is_an_error(visible: str, local_rank: int, local_size: int) -> None:
    with pytest.raises(LaunchError, match=f"local rank {local_rank} of {local_size} on n1 has no GPU of its own: "
                                          "the task sees 2 GPUs"):
        gpu_for_rank(visible, local_rank, local_size, "n1")


def test_local_size_under_srun_and_mpirun() -> None:
    assert local_size_of({"SLURM_STEP_TASKS_PER_NODE": "3,2", "SLURM_NODEID": "1"}) == 2
    assert local_size_of({"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "SLURM_NODEID": "0"}) == 4


@pytest.mark.parametrize("text, failed", [
    ("srun: error: n2: task 3: Exited with exit code 3\n", (3, "n2", "Exited with exit code 3")),
    ("srun: error: n1: tasks 0-1: Killed\n", (0, "n1", "Killed")),
    ("srun: Job step aborted\n", None),
])
def test_failed_task_is_read_from_srun(tmp_path: Path, text: str, failed: tuple[int, str, str] | None) -> None:
    log = tmp_path / "srun.log"
    log.write_text(text)
    assert srun_failed_task(log) == failed


def _failure(logs: Path, rank: int, unix: float, log: str) -> None:
    (logs / f"rank-{rank}.failed.json").write_text(json.dumps({"rank": rank, "host": f"n{rank // 2 + 1}",
                                                               "reason": "exit code 1", "unix": unix}))
    (logs / f"rank-{rank}.log").write_text(log)


def test_the_rank_that_failed_on_its_own_is_the_cause(tmp_path: Path) -> None:
    # rank 2 noticed rank 3's death first and exited, with Horovod's shutdown message; rank 3 died without it
    _failure(tmp_path, 2, 100.0, "UnknownError: Horovod has been shut down. This was caused by an exception")
    _failure(tmp_path, 3, 100.5, "rank 3: killing itself (SIGKILL) on purpose after epoch 1\n")
    assert first_failed_rank(tmp_path).rank == 3  # type: ignore[union-attr]


def test_without_a_clear_cause_the_earliest_failure_is_named(tmp_path: Path) -> None:
    _failure(tmp_path, 1, 7.0, "Traceback: ValueError")
    _failure(tmp_path, 0, 5.0, "Traceback: OSError")
    assert first_failed_rank(tmp_path).rank == 0  # type: ignore[union-attr]
    assert first_failed_rank(tmp_path / "none") is None


def test_a_stop_is_read_from_this_attempts_part_of_rank_0s_log(tmp_path: Path) -> None:
    # srun SIGKILLs ranks still exiting KillWait + 2 s after a SIGTERM: rank 0's own line says the checkpoint is whole
    log = tmp_path / "rank-0.log"
    assert not stopped_after_checkpoint(log)
    stop = "hvdflow: stopped at epoch 1 step 1 on signal SIGTERM; exiting with status 75 to be resumed\n"
    log.write_text("# hvdflow rank task, job 80 (restart 0)\n# hvdflow rank task: forwarding SIGTERM to the rank\n" + stop)
    assert stopped_after_checkpoint(log)
    # Slurm's SIGTERM at the limit, forwarded after the stop: still this attempt
    log.write_text(log.read_text() + "# hvdflow rank task: forwarding SIGTERM to the rank\n")
    assert stopped_after_checkpoint(log)
    log.write_text(log.read_text() + "# hvdflow rank task, job 81 (restart 0)\nhvdflow: epoch 2/6\n")  # a later attempt
    assert not stopped_after_checkpoint(log)


def test_exit_reasons_of_a_rank(tmp_path: Path) -> None:
    result = tmp_path / "rank-0.json"
    assert exit_reason(3, result) == "exit code 3" and exit_reason(-9, result) == "killed by signal 9"
    assert exit_reason(0, result) == f"exited 0 without writing {result}"
    result.write_text("{}")
    assert exit_reason(0, result) is None


def test_scratch_of_the_users_ended_jobs_is_swept_and_nothing_else(tmp_path: Path) -> None:
    user_dir = tmp_path / "hvdflow-user"
    for name in ("job-7", "job-8", "job-9", "other-data"):
        (user_dir / name / "dataset").mkdir(parents=True)
    user_dir.chmod(0o700)
    (tmp_path / "outside").mkdir()
    (user_dir / "job-10").symlink_to(tmp_path / "outside")  # a link in the user's folder: removed, not followed
    removed = sweep_ended_jobs(user_dir, {"8", "11"})
    assert removed == [user_dir / "job-10", user_dir / "job-7", user_dir / "job-9"]
    assert sorted(p.name for p in user_dir.iterdir()) == ["job-8", "other-data"]
    assert (tmp_path / "outside").is_dir()
    assert sweep_ended_jobs(tmp_path / "nothing-yet", {"8"}) == []


def staging_report_json(procid: str, **changes: object) -> dict[str, object]:
    """A whole staging report (``task-<rank>.json``) as a waiting task of a two-node step writes it."""
    return {"SLURM_PROCID": procid, "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURMD_NODENAME": "n1",
            "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NUM_TASKS": "4", "hostname": "n1", "bytes_copied": None, "swept": [], "seconds": 0.25,
            "hvdflow_source": "/src", **changes}


def test_staging_reports_are_read_in_rank_order(tmp_path: Path) -> None:
    for rank in (10, 2, 0):
        (tmp_path / f"task-{rank}.json").write_text(json.dumps(staging_report_json(str(rank))))
    assert [r.procid for r in read_reports(tmp_path)] == ["0", "2", "10"]


def _ignores(pid: int, sig: signal.Signals) -> bool:
    """Whether process ``pid`` ignores ``sig`` (its ``SigIgn`` mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(mask & (1 << (sig - 1)))


def test_a_staging_task_caught_by_the_time_limits_warning_goes_on_and_reports(tmp_path: Path) -> None:
    # --signal=USR1@grace warns every step of the job: a staging task (here one waiting for its node's first task)
    # or a clean-up task it catches must not die of SIGUSR1's default action
    dest, reports = tmp_path / "scratch/hvdflow-user/job-5/dataset", tmp_path / "reports"
    reports.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "SLURM_LOCALID": "1", "SLURM_PROCID": "1"}
    err = tmp_path / "stderr"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "hvdflow.slurm.staging", "stage", str(tmp_path / "source"),
                                 str(dest), str(reports), "5"], env=env, stderr=stderr, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 10  # started and waiting by then, however slow the machine
        while proc.poll() is None and not _ignores(proc.pid, signal.SIGUSR1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, err.read_text()
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert proc.poll() is None, "the staging task died of the warning signal"
        dest.mkdir(parents=True)
        (dest / "index.json").write_text("{}")
        assert proc.wait(timeout=30) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert json.loads((reports / "task-1.json").read_text())["SLURM_LOCALID"] == "1"


# the rank below a waiting parent, as the trainer sits below `udocker run` and proot: it checkpoints on SIGUSR1
RANK_BELOW_A_PARENT = r"""
import subprocess, sys
child = '''
import signal, sys, time
def stop(signum, frame):
    print("rank got", signal.Signals(signum).name, flush=True)
    sys.exit(75)
signal.signal(signal.SIGUSR1, stop)
print("ready", flush=True)
time.sleep(120)
'''
sys.exit(subprocess.call([sys.executable, "-c", child]))
"""

FORWARDER = """
import sys
from hvdflow.slurm.rank_task import run_forwarding_signals
with open(sys.argv[1], "ab") as log:
    sys.exit(run_forwarding_signals([sys.executable, "-c", sys.argv[2]], log, dict(__import__("os").environ)))
"""


def test_the_rank_task_forwards_usr1_past_a_waiting_parent_to_the_rank(tmp_path: Path) -> None:
    # proctrack/cgroup signals only a task's top process: the rank task must pass it on, and the process between
    # it and the rank (udocker's Python) must survive it
    log = tmp_path / "rank.log"
    task = subprocess.Popen([sys.executable, "-c", FORWARDER, str(log), RANK_BELOW_A_PARENT],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    deadline = time.monotonic() + 60
    while "ready" not in (log.read_text() if log.exists() else ""):
        assert task.poll() is None and time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.05)
    os.kill(task.pid, signal.SIGUSR1)  # the top process only
    assert task.wait(timeout=30) == 75
    text = log.read_text()
    assert "forwarding SIGUSR1 to the rank" in text and "rank got SIGUSR1" in text


LATE_SIGNALS = """
import os, signal, sys
from hvdflow.slurm.rank_task import run_forwarding_signals
with open(sys.argv[1], "ab") as log:
    code = run_forwarding_signals([sys.executable, "-c", "print('rank done', flush=True)"], log, dict(os.environ))
for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):  # the scheduler's warning, after this node's rank ended
    os.kill(os.getpid(), signum)
print("reported", code, flush=True)
sys.exit(code)
"""


def test_a_stop_signal_after_the_rank_ended_does_not_kill_its_task(tmp_path: Path) -> None:
    # a task whose rank finished before the time limit's warning came (the warning reaches every task of the step at
    # once) was killed by USR1's default action while it reported, and srun failed the completed run (CI, job 851)
    log = tmp_path / "rank.log"
    done = subprocess.run([sys.executable, "-c", LATE_SIGNALS, str(log)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert (done.returncode, done.stdout) == (0, "reported 0\n"), done.stderr
    assert "rank done" in log.read_text()
