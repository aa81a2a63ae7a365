"""Horovod ranks in the hvdflow-cpu image, run by udocker as an ordinary user: Gloo and MPI launch models."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import HpcUser, Registry
from hvdflow.images.build.image import BuiltImage

pytestmark = [pytest.mark.image, pytest.mark.e2e]


@pytest.fixture(scope="session")
def cpu_pull(hpc_user: HpcUser, registry: Registry, cpu_image: BuiltImage) -> list[str]:
    """Pull the image once for the session as the user; returns the common pull arguments for hvdflow smoke."""
    base = hpc_user.mkdir(hpc_user.tests_dir / "cpu")
    args = ["hvdflow-cpu", "--catalog", str(hpc_user.workspace / "containers" / "catalog.yaml"),
            "--registry", registry.url, "--udocker-dir", str(base / "udocker"), "--lock", str(base / "images.lock.yaml")]
    pulled = hpc_user.hvdflow("image", "pull", *args, timeout=900)
    assert pulled.returncode == 0, pulled.stderr
    record = json.loads(pulled.stdout)
    assert record["digest"] == cpu_image.manifest_digest
    return args


def _smoke(user: HpcUser, pull_args: list[str], out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return user.hvdflow("smoke", *pull_args, "--out", str(out), *extra, timeout=1200)


@pytest.fixture(scope="module")
def gloo_smoke(hpc_user: HpcUser, cpu_pull: list[str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Two ranks over Gloo, run once for the module: the run itself and the folder it wrote (the MPI test compares
    its weights with these)."""
    user_tmp = hpc_user.mkdir(hpc_user.tests_dir / f"t-{uuid.uuid4().hex[:8]}")
    return _smoke(hpc_user, cpu_pull, user_tmp / "gloo", "--launcher", "gloo", "--ranks", "2"), user_tmp


def test_gloo_two_ranks_train_to_identical_weights(gloo_smoke: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, user_tmp = gloo_smoke
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # stdout is the summary alone; the progress lines go to stderr
    assert "hvdflow: starting from scratch" in proc.stderr and "hvdflow: epoch 5/5: " in proc.stderr, proc.stderr[-3000:]
    ranks = [json.loads((user_tmp / "gloo" / "train" / f"rank-{r}.json").read_text()) for r in range(2)]
    assert [r["controller"] for r in ranks] == ["gloo", "gloo"]
    assert [(r["rank"], r["size"], r["local_rank"], r["local_size"]) for r in ranks] == [(0, 2, 0, 2), (1, 2, 1, 2)]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"] == summary["weights_sha256"]
    assert summary["val_accuracy"] > 0.9
    assert (summary["tensorflow"], summary["horovod"]) == ("2.15.1", "0.28.1")
    assert json.loads((user_tmp / "gloo" / "summary.json").read_text()) == summary
    assert summary["proot"].endswith("/ROOT/opt/hvdflow/bin/proot")  # the image's own engine, by default
    # the rendezvous store (no authentication) listened on loopback only, not on every interface as Horovod's would
    assert "rendezvous server listening on 127.0.0.1:" in (user_tmp / "gloo" / "logs" / "train" / "rendezvous.log").read_text()


SECCOMP_OF_CONTAINER = """
import sys
from pathlib import Path
from hvdflow.runtime.udocker.client import Udocker
from hvdflow.images.udocker_tools import engine_binary
udocker_dir, container, choice = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
udocker = Udocker(udocker_dir, proot=engine_binary(udocker_dir, container, choice))
status = udocker.check("run", "--nobanner", container, "cat", "/proc/self/status").stdout
print([line for line in status.splitlines() if line.startswith("Seccomp:")][0])
"""


def test_the_images_proot_runs_the_container_under_its_seccomp_filter_and_the_hosts_does_not(
        hpc_user: HpcUser, cpu_pull: list[str], udocker_dir: Path) -> None:
    pulled = hpc_user.hvdflow("image", "pull", *cpu_pull, timeout=900)
    assert pulled.returncode == 0, pulled.stderr
    container = json.loads(pulled.stdout)["container"]
    seen = {}
    for choice in ("image", "host"):
        proc = hpc_user.run([str(hpc_user.venv / "bin" / "python"), "-c", SECCOMP_OF_CONTAINER, str(udocker_dir),
                             container, choice])
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[choice] = proc.stdout.split()
    # mode 2: a seccomp filter; only the system calls proot must rewrite stop in ptrace. Debian's proot: none.
    assert seen == {"image": ["Seccomp:", "2"], "host": ["Seccomp:", "0"]}


def test_mpi_two_ranks_match_gloo_weights(hpc_user: HpcUser, cpu_pull: list[str],
                                         gloo_smoke: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    gloo, user_tmp = gloo_smoke
    # the MPI ranks' use is not sampled: the weights are the same with and without the sampler (and either launcher)
    mpi = _smoke(hpc_user, cpu_pull, user_tmp / "mpi", "--launcher", "mpi", "--ranks", "2", "--usage-seconds", "0")
    assert gloo.returncode == 0, gloo.stderr
    assert mpi.returncode == 0, mpi.stderr
    ranks = [json.loads((user_tmp / "mpi" / "train" / f"rank-{r}.json").read_text()) for r in range(2)]
    assert [r["controller"] for r in ranks] == ["mpi", "mpi"] and [r["usage"] for r in ranks] == [None, None]
    sampled = [json.loads((user_tmp / "gloo" / "train" / f"rank-{r}.json").read_text())["usage"] for r in range(2)]
    assert all(usage["samples"] and usage["cpu_seconds"] > 0 for usage in sampled), sampled
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert json.loads(mpi.stdout)["weights_sha256"] == json.loads(gloo.stdout)["weights_sha256"]
    # each rank ran on its own half of this machine's cores (sched_setaffinity for Gloo, taskset under mpirun), as
    # the trainer saw from inside the container, with as many threads
    cores = sorted(os.sched_getaffinity(0))
    half = len(cores) // 2
    assert half >= 1, f"the test needs 2 cores, this machine lets it use {cores}"
    for launcher in ("gloo", "mpi"):
        seen = [json.loads((user_tmp / launcher / "train" / f"rank-{r}.json").read_text()) for r in range(2)]
        assert [(r["cpus"], r["threads"]) for r in seen] == [(cores[:half], half), (cores[half:2 * half], half)], launcher


@pytest.mark.testbed_lane  # in the test bed's lane, to even out the two lanes' time (its pull is the lane's own)
@pytest.mark.parametrize("launcher", ["gloo", "mpi"])
def test_a_failed_rank_stops_the_job_and_is_named(hpc_user: HpcUser, cpu_pull: list[str], user_tmp: Path,
                                                  launcher: str) -> None:
    out = user_tmp / launcher
    proc = _smoke(hpc_user, cpu_pull, out, "--launcher", launcher, "--ranks", "2", "--fail-rank", "1")
    assert proc.returncode == 1
    assert "rank 1 failed with exit code 3" in proc.stderr
    assert str(out / "logs" / "train" / "rank-1.log") in proc.stderr
    assert not (out / "summary.json").exists()
    assert not (out / "train" / "model").exists() and not (out / "train" / "metrics.json").exists()
    assert not list((out / "train").glob("rank-*.json"))
