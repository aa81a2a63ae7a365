"""udocker's runc mode (R1) as hvdflow runs it: ranks' statuses and streams, signals, concurrent runs of one container,
``execmode: auto`` choosing R1 here and P1 where user namespaces are refused, and the demo's weights equal to P1's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO, HpcUser, Registry
from pipeline_run import Pipeline, processes_naming, tmp_leftovers

pytestmark = [pytest.mark.image, pytest.mark.e2e]

R1 = {"HVDFLOW_EXECMODE": "R1"}
AUTO = {"HVDFLOW_EXECMODE": "auto"}


@pytest.fixture(scope="module")
def r1_pull(hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> list[str]:
    """hvdflow-cpu pulled into the session's udocker directory with execmode R1: a container of its own."""
    lock = udocker_dir.parent / "images.lock.yaml"
    args = ["hvdflow-cpu", "--catalog", str(hpc_user.workspace / "containers" / "catalog.yaml"), "--registry",
            registry.url, "--udocker-dir", str(udocker_dir), "--lock", str(lock), "--execmode", "R1"]
    pulled = hpc_user.hvdflow("image", "pull", *args, timeout=900)
    assert pulled.returncode == 0, pulled.stderr
    record = json.loads(pulled.stdout)
    assert (record["execmode"], record["container"]) == ("R1", record["container"].rsplit("-", 1)[0] + "-r1")
    return args


RUN_IN_CONTAINER = """
import json, sys
from pathlib import Path
from hvdflow.runtime.udocker.client import Udocker, run_argv
udocker = Udocker(Path(sys.argv[1]))
env = {k: v for k, v in udocker.env().items() if k.startswith("UDOCKER_")}
print(json.dumps([run_argv(udocker, sys.argv[3], sys.argv[4:], as_user=sys.argv[2] == "True"), env]))
"""


def _run_argv(user: HpcUser, udocker_dir: Path, container: str, *command: str, as_user: bool = False
              ) -> tuple[list[str], dict[str, str]]:
    """How hvdflow runs ``command`` in ``container`` under R1 (``as_user``: P1): the command line and udocker's
    variables."""
    proc = user.run(["python3", "-c", RUN_IN_CONTAINER, str(udocker_dir), str(as_user), container, *command], check=True)
    argv, env = json.loads(proc.stdout)
    return argv, env


def test_an_r1_run_gives_the_commands_status_and_streams_and_ten_at_once_all_start(
        hpc_user: HpcUser, r1_pull: list[str], udocker_dir: Path) -> None:
    container = json.loads(hpc_user.hvdflow("image", "pull", *r1_pull, timeout=900).stdout)["container"]
    script = "import sys, time; time.sleep(1); print('out caf\\u00e9'); print('err', file=sys.stderr); sys.exit(3)"
    argv, env = _run_argv(hpc_user, udocker_dir, container, "python3", "-c", script)
    assert env["UDOCKER_USE_RUNC_EXECUTABLE"] == "/usr/sbin/runc"  # Debian's, not on an ordinary user's PATH
    # stock udocker: status 1 whatever the command's, the streams merged through a pty, output cut, a crash on UTF-8
    with ThreadPoolExecutor(10) as pool:  # one container, one udocker directory: ten runs at once
        runs = list(pool.map(lambda _: hpc_user.run(argv, extra_env=env, timeout=300), range(10)))
    assert [(proc.returncode, proc.stdout, proc.stderr) for proc in runs] == [(3, "out café\n", "err\n")] * 10, runs
    assert processes_naming(udocker_dir) == []


@pytest.mark.parametrize("mode", ["R1", "P1"])
def test_a_udocker_run_stopped_with_sigterm_removes_its_temporary_files(
        demo: Pipeline, hpc_user: HpcUser, r1_pull: list[str], udocker_dir: Path, user_tmp: Path, mode: str) -> None:
    # what a launcher does to the rendezvous server at the end of every run: SIGTERM to its process group. udocker
    # used to die of it before its own clean-up, leaving its copies of passwd and group (and R1's bundle and bind
    # folders) in the node's tmp for good
    container = (json.loads(hpc_user.hvdflow("image", "pull", *r1_pull, timeout=900).stdout)["container"]
                 if mode == "R1" else demo.json("resources/images/hvdflow-cpu.json")["container"])
    server = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
              "print('up', flush=True); time.sleep(120)")  # ends on SIGTERM, as the rendezvous server does
    argv, env = _run_argv(hpc_user, udocker_dir, container, "python3", "-c", server, as_user=mode == "P1")
    env_args = [f"{k}={v}" for k, v in hpc_user.env({**env, "TMPDIR": str(user_tmp)}).items()]
    running = subprocess.Popen(["runuser", "-u", hpc_user.name, "--", "env", "-i", *env_args, *argv], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    assert running.stdout is not None and running.stdout.readline() == "up\n", running.communicate()
    assert sorted(p.name.rsplit("-", 1)[1] for p in user_tmp.iterdir()) == (
        ["BIND_FILES", "SPECDIR", "group", "passwd"] if mode == "R1" else ["group", "passwd"])  # in udocker's tmp
    os.killpg(running.pid, signal.SIGTERM)  # runuser's group too: its own status is its death by the signal
    _, stderr = running.communicate(timeout=60)
    assert list(user_tmp.iterdir()) == [] and processes_naming(udocker_dir) == [], stderr


def test_auto_trains_the_demo_under_r1_here_and_p1_where_user_namespaces_are_disabled_to_p1s_weights(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    # the profiles' default: both containers made, each rank probes its node, says its choice in its log and result
    started = time.time()
    pipeline = Pipeline(hpc_user, registry, udocker_dir, prepared=demo)
    proc = pipeline.snakemake(extra_env=AUTO)
    assert proc.returncode == 0, proc.stderr[-5000:]
    weights = demo.json("results/demo/run.json")["weights_sha256"]
    record = pipeline.json("results/demo/run.json")
    assert (record["image"]["execmode"], record["image"]["runc_container"]) == (
        "auto", record["image"]["container"] + "-r1"), record["image"]
    assert [r["execmode"] for r in record["ranks"]] == ["R1", "R1"] and record["weights_sha256"] == weights
    node = record["ranks"][0]["hostname"]
    assert f"# hvdflow: execmode auto chose R1 on {node} (user namespaces allowed" in _rank_log(pipeline, 1)
    assert pipeline.processes() == []

    # the same image records and containers (a tree prepared by that run), trained where the kernel refuses user
    # namespaces (max_user_namespaces 0 in a user namespace of the test's own, as a site's sysctl does): every rank
    # falls back to P1 on its own, and says why
    limited = Pipeline(hpc_user, registry, udocker_dir, prepared=pipeline)
    limit = limited.root / "limit_userns.py"
    shutil.copy(REPO / "tests" / "limit_userns.py", limit)
    proc = limited.snakemake(extra_env=AUTO, wrapper=["python3", str(limit), "0"])
    assert proc.returncode == 0, proc.stderr[-5000:]
    fallback = limited.json("results/demo/run.json")
    assert fallback["image"]["runc_container"] == record["image"]["runc_container"]  # offered, and refused per rank
    assert [r["execmode"] for r in fallback["ranks"]] == ["P1", "P1"] and fallback["weights_sha256"] == weights
    assert (f"# hvdflow: execmode auto chose P1 on {node}: user namespaces are disabled on {node} "
            "(user.max_user_namespaces = 0)") in _rank_log(limited, 0)
    assert limited.processes() == []
    # nothing of udocker's in the node's tmp from either run: the ranks' and the rendezvous servers' (stopped with
    # SIGTERM at the end) under R1 and under P1
    assert tmp_leftovers(hpc_user.uid, started) == []


def test_a_rank_that_exits_3_under_r1_is_named_and_leaves_no_outputs(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    failing = Pipeline(hpc_user, registry, udocker_dir, prepared=demo)
    failed = failing.snakemake(extra_env={**R1, "HVDFLOW_INJECT_RANK_FAILURE": "1:1.5:exit"})
    assert failed.returncode != 0
    assert "rank 1 failed with exit code 3" in failed.stdout + failed.stderr, failed.stderr[-5000:]
    assert "# hvdflow: execmode R1 on " in _rank_log(failing, 1)
    for name in ("model", "metrics.json", "run.json", "history.csv"):
        assert not (failing.root / "results/demo" / name).exists(), name
    assert failing.processes() == []


def _rank_log(pipeline: Pipeline, rank: int) -> str:
    return (pipeline.root / f"logs/train/demo/rank-{rank}.log").read_text()


def test_ctrl_c_under_r1_checkpoints_every_rank_and_a_killed_launcher_leaves_nothing(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    # the ranks are PID 1 of their containers' pid namespaces, in sessions of their own: runc passes the group's
    # signals to hvdflow's last_exit there, which passes them to the trainer
    pipeline = Pipeline(hpc_user, registry, udocker_dir, prepared=demo)
    running = pipeline.start_snakemake(extra_env=R1)
    _wait_for_epoch(pipeline, running, 2)
    os.killpg(running.pid, signal.SIGINT)
    stopped = Pipeline.finish(running, timeout=300)
    assert "stopped on a signal after a checkpoint (exit status 75)" in stopped.stdout + stopped.stderr
    assert pipeline.processes() == []
    manifest = pipeline.json("results/demo/checkpoints/manifest.json")
    assert manifest["checkpoints"][-1]["reason"] == "signal SIGINT" and not manifest["finished"], manifest
    assert "on signal SIGINT; exiting with status 75" in (pipeline.root / "logs/train/demo/rank-1.log").read_text()

    # the hard stop: SIGKILL to each rank's process group (udocker and runc; supervise's last resort for a rank that
    # ignores SIGTERM). Each container's init asked for SIGKILL at runc's death, so nothing of the ranks is left
    running = pipeline.start_snakemake(extra_env=R1)
    _wait_for_epoch(pipeline, running, 4)
    launchers = _launchers(pipeline.root)
    assert len(launchers) == 2, launchers
    for pid in launchers:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    killed = Pipeline.finish(running, timeout=300)
    assert killed.returncode != 0 and "exit code -9 (SIGKILL)" in killed.stdout + killed.stderr, killed.stderr[-5000:]
    assert pipeline.processes() == [], "a rank or runc outlived the killed launcher"
    resumed = pipeline.snakemake(extra_env=R1)
    assert resumed.returncode == 0, resumed.stderr[-5000:]
    assert pipeline.json("results/demo/run.json")["weights_sha256"] == demo.json("results/demo/run.json")["weights_sha256"]
    assert pipeline.processes() == []


def _wait_for_epoch(pipeline: Pipeline, running: subprocess.Popen[str], epoch: int) -> None:
    log = pipeline.root / "logs/train/demo/rank-0.log"
    deadline = time.monotonic() + 900
    while f"hvdflow: epoch {epoch}/10" not in (log.read_text() if log.exists() else ""):
        assert running.poll() is None and time.monotonic() < deadline, Pipeline.finish(running).stderr[-5000:]
        time.sleep(0.05)


def _launchers(root: Path) -> list[int]:
    """The udocker processes (hvdflow's launcher) of the training ranks of the tree ``root`` (not the rendezvous
    server's)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "runtime/udocker/launcher.py" in text and "hvdflow_trainer.train" in text and str(root) in text:
            found.append(int(cmdline.parent.name))
    return found


def test_open_mpi_ranks_are_refused_under_r1_by_name(hpc_user: HpcUser, r1_pull: list[str], user_tmp: Path) -> None:
    # tried: MPI_Init failed in the ranks ("OPAL ERROR: Unreachable": mpirun's PMIx server is out of their reach
    # from runc's namespaces) and mpirun then waited for minutes
    proc = hpc_user.hvdflow("smoke", *r1_pull, "--out", str(user_tmp / "mpi"), "--launcher", "mpi", "--ranks", "2",
                            "--epochs", "1", timeout=300)
    assert proc.returncode != 0
    assert "execmode R1 cannot run launcher mpi: ranks in runc's namespaces cannot reach mpirun's PMIx" in proc.stderr
    assert processes_naming(user_tmp) == [] and not list((user_tmp / "mpi").glob("train/rank-*.json"))
