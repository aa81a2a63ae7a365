"""The pipeline on a real Slurm cluster (the test bed: slurmctld, slurmdbd + MariaDB, two slurmd nodes in network
namespaces with four fake GPUs each), submitted by the ordinary user through snakemake-executor-plugin-slurm.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pty
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from conftest import HpcUser, Registry
from hvdflow.images.build.image import BuiltImage
from hvdflow.pipeline.resume import KILLED
from hvdflow.testbed import cluster as testbed
from hvdflow.testbed import config as tc
from pipeline_run import Pipeline, benchmark_pipeline, configured_pipeline, processes_naming, read_table, tmp_leftovers

pytestmark = [pytest.mark.image, pytest.mark.e2e, pytest.mark.slurm]

# the experiment of the cluster runs: 4 ranks, 3 epochs, the demo's other hyperparameters
CLUSTER_EXPERIMENT = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": 4, "nodes": 2, "model": "mlp",
                      "hidden_units": 64, "epochs": 3, "batch_size": 32, "learning_rate": 0.01, "momentum": 0.9,
                      "warmup_epochs": 1, "seed": 1234}


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """The test bed, started for the session (and stopped after it, unless it was already running)."""
    layout = testbed.default_layout()
    was_running = any(testbed.status(layout).values())
    testbed.start(layout)
    yield layout
    if not was_running:
        testbed.stop(layout)


def experiment_pipeline(user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline | None = None,
                        **changes: Any) -> Pipeline:
    """A tree whose config trains only the cluster experiment (``changes`` applied to it), started from the
    ``prepared`` tree's image record and dataset when given."""
    return configured_pipeline(user, registry, udocker_dir, prepared,
                               experiments={"cluster": {**CLUSTER_EXPERIMENT, **changes}})


def node_scratch_leftovers(layout: Any) -> list[Path]:
    """Job folders left in any node's scratch (``<scratch>/hvdflow-<user>/job-<id>``), and anything at the layout
    before it (``<scratch>/hvdflow-job-<id>``)."""
    return [p for node in layout.node_names for pattern in ("hvdflow-*/job-*", "hvdflow-job-*")
            for p in layout.node_scratch(node).glob(pattern)]


@pytest.fixture(scope="module")
def local_runs(hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline) -> Callable[..., Pipeline]:
    """The cluster experiment with 4 ranks on this machine (local profile, one node), per launcher, epochs and other
    changes, run once each: the uninterrupted runs the cluster runs are compared with."""
    runs: dict[tuple[object, ...], Pipeline] = {}

    def run(launcher: str, epochs: int = CLUSTER_EXPERIMENT["epochs"], **changes: object) -> Pipeline:
        key = (launcher, epochs, json.dumps(changes, sort_keys=True))
        if key not in runs:
            pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, nodes=1, epochs=epochs,
                                           **changes)
            proc = pipeline.snakemake("results/cluster/run.json", extra_env={"HVDFLOW_LAUNCHER": launcher})
            assert proc.returncode == 0, proc.stderr[-5000:]
            # the prepared dataset is reused, although this config lists its keys in another order than the prepared
            # tree's (Snakemake compares the rules' params as written)
            assert "list_dataset" not in proc.stdout + proc.stderr, proc.stderr[-5000:]
            runs[key] = pipeline
        return runs[key]

    return run


@pytest.fixture(scope="module")
def slurm_prepared() -> list[Pipeline]:
    """The tree of the first cluster run, whose image pull and digits preparation ran through Slurm: the second
    launcher's run starts from it (shared set-up: the Slurm path of the preparation is tested once)."""
    return []


@pytest.fixture(scope="module", params=["gloo", "mpi"])
def cluster_run(request: pytest.FixtureRequest, cluster: Any, hpc_user: HpcUser, registry: Registry,
                udocker_dir: Path, slurm_prepared: list[Pipeline]) -> tuple[str, Pipeline, subprocess.CompletedProcess[str]]:
    """The cluster experiment, 2 nodes x 2 ranks, through Slurm with each launcher; the first one prepares the
    dataset through Slurm too."""
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, slurm_prepared[0] if slurm_prepared else None)
    proc = pipeline.snakemake("--verbose", profile="testbed", extra_env={"HVDFLOW_LAUNCHER": request.param})
    assert proc.returncode == 0, proc.stderr[-8000:]
    if not slurm_prepared:
        output = proc.stdout + proc.stderr
        for rule in ("list_dataset", "prepare_chunk"):  # Slurm jobs, not local rules
            assert f"rule {rule}:" in output and f"localrule {rule}:" not in output, output[-8000:]
        slurm_prepared.append(pipeline)
    return request.param, pipeline, proc


def test_the_test_bed_is_a_real_cluster_with_accounting_and_gpus(cluster: Any, hpc_user: HpcUser) -> None:
    proc = hpc_user.run(["srun", "--nodes=2", "--ntasks=3", "--gres=gpu:2", "sh", "-c",
                         "echo $SLURM_PROCID $(hostname) $CUDA_VISIBLE_DEVICES"], check=True)
    assert sorted(proc.stdout.split("\n")[:3]) == ["0 n1 0,1", "1 n1 0,1", "2 n2 0,1"]
    job = hpc_user.run(["sbatch", "--parsable", "--wait", "--wrap", "hostname"], check=True).stdout.strip()
    accounted = hpc_user.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,NodeList"], check=True)
    state, node = accounted.stdout.strip().split("|")
    assert state == "COMPLETED" and node in cluster.node_names


def test_ranks_span_two_nodes_one_gpu_each_and_match_the_local_run(
        cluster_run: tuple[str, Pipeline, subprocess.CompletedProcess[str]], local_runs: Callable[..., Pipeline],
        cluster: Any) -> None:
    launcher, pipeline, proc = cluster_run
    record = pipeline.json("results/cluster/run.json")
    assert record["launcher"] == launcher and record["hosts"] == ["n1", "n2"]
    assert [(r["rank"], r["hostname"], r["local_rank"]) for r in record["ranks"]] == \
        [(0, "n1", 0), (1, "n1", 1), (2, "n2", 0), (3, "n2", 1)]
    assert {r["controller"] for r in record["ranks"]} == {launcher}
    for host in ("n1", "n2"):
        gpus = [r["cuda_visible_devices"] for r in record["ranks"] if r["hostname"] == host]
        assert all(g is not None and "," not in g for g in gpus) and len(set(gpus)) == 2, gpus
    assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}
    # the same reduction order as 4 ranks on one machine with the same launcher (Gloo's ring and Open MPI's
    # allreduce sum in different orders, so the two launchers differ from each other at 4 ranks)
    local = local_runs(launcher).json("results/cluster/run.json")
    assert record["weights_sha256"] == local["weights_sha256"] and local["launcher"] == launcher
    # one thread per rank on both: the job's cpus_per_task is 1, and 4 local ranks on this machine's cores are not bound
    assert {r["threads"] for r in record["ranks"]} == {r["threads"] for r in local["ranks"]} == {1}
    slurm = record["slurm"]
    assert slurm["job_id"] and slurm["nodelist"] == "n[1-2]" and slurm["tasks_per_node"] == "2(x2)"
    assert sorted(slurm["staging"]) == ["n1", "n2"] and all(s["bytes"] > 0 for s in slurm["staging"].values())
    rule_log = (pipeline.root / "logs" / "train" / "cluster.log").read_text()
    for host in ("n1", "n2"):  # each node's staging, in the rule's log
        assert f"hvdflow: staged on {host}: " in rule_log and " shards, copied and verified in " in rule_log, rule_log
    assert not node_scratch_leftovers(cluster)
    # one source of code: the rule and every job step on both nodes imported the pipeline tree's own hvdflow
    assert record["code"]["hvdflow_source"] == str(pipeline.root / "src")
    assert slurm["hvdflow_source"] == [str(pipeline.root / "src")]
    logs = pipeline.root / "logs" / "train" / "cluster"
    assert "no NVIDIA driver on n2: udocker setup --nvidia skipped" in (logs / "rank-3.log").read_text()
    if launcher == "gloo":  # the rendezvous server ran on the first node and the ranks found it there
        assert pipeline.json("logs/train/cluster/rendezvous.json")["addr"] == cluster.node_addr("n1")
        assert f"Gloo rendezvous {cluster.node_addr('n1')}:" in (logs / "rank-3.log").read_text()
        # listening on the cluster's network only
        assert f"rendezvous server listening on {cluster.node_addr('n1')}:" in (logs / "rendezvous.log").read_text()
    output = proc.stdout + proc.stderr
    [sbatch] = [line for line in output.splitlines() if "sbatch call: sbatch" in line and "rule_train" in line]
    assert {"--nodes=2", "--ntasks-per-node=2", "--gres=gpu:2", "--requeue", "--signal=USR1@60",
            "--open-mode=append"} <= set(sbatch.split()), sbatch
    evaluation = pipeline.json("results/cluster/evaluation.json")
    assert evaluation["accuracy"] > 0.8
    # how the allocation was used: hvdflow's step times and Slurm's accounting of the job, side by side
    report = pipeline.hvdflow("report", "results/cluster")
    assert report.returncode == 0, report.stderr
    assert f"Slurm's accounting of job {slurm['job_id']} (sacct):" in report.stdout, report.stdout
    steps = [line.split() for line in report.stdout.splitlines() if line.startswith(f"{slurm['job_id']}.")]
    assert any(row[1] == "batch" and row[2] == "COMPLETED" for row in steps), report.stdout
    assert "\nverdict: " in report.stdout and [r["rank"] for r in record["ranks"] if r["step_times"]] == [0, 1, 2, 3]
    # the nodes' fake GPUs have no driver: each rank's usage and the report say so, naming the node
    for rank in record["ranks"]:
        assert rank["usage"]["gpu"] is None, rank["usage"]
        assert rank["usage"]["gpu_absent"] == f"no NVIDIA driver on {rank['hostname']}", rank["usage"]
    assert "no NVIDIA driver on n1" in report.stdout and "no NVIDIA driver on n2" in report.stdout, report.stdout


def test_execmode_auto_runs_each_nodes_ranks_under_runc_and_gives_the_weights_of_p1(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    # execmode auto (the profiles' default): both containers made on the submit host, and each rank's node probed
    # where the rank starts: rootless runc (R1) on both nodes here; the same reduction as 4 ranks under P1 on one machine
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    proc = pipeline.snakemake("results/cluster/run.json", profile="testbed", extra_env={"HVDFLOW_EXECMODE": "auto"})
    assert proc.returncode == 0, proc.stderr[-8000:]
    record = pipeline.json("results/cluster/run.json")
    image = record["image"]
    assert (image["execmode"], image["runc_container"]) == ("auto", image["container"] + "-r1"), image
    assert [(r["rank"], r["hostname"], r["execmode"]) for r in record["ranks"]] == [
        (0, "n1", "R1"), (1, "n1", "R1"), (2, "n2", "R1"), (3, "n2", "R1")]
    for rank, node in ((0, "n1"), (3, "n2")):
        log = (pipeline.root / f"logs/train/cluster/rank-{rank}.log").read_text()
        assert f"# hvdflow: execmode auto chose R1 on {node} (user namespaces allowed, runc " in log, log[-3000:]
    assert record["weights_sha256"] == local_runs("gloo").json("results/cluster/run.json")["weights_sha256"]
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


def test_neighbour_training_on_two_nodes_converges_and_matches_the_local_run(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    # a ring of 4 ranks, 2 per node: each rank exchanges with one rank on its node and one on the other
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, strategy="neighbour")
    proc = pipeline.snakemake("results/cluster/evaluation.json", profile="testbed")
    assert proc.returncode == 0, proc.stderr[-8000:]
    record = pipeline.json("results/cluster/run.json")
    assert [(r["rank"], r["hostname"]) for r in record["ranks"]] == [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")]
    assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}  # averaged once at the end
    assert [e["sent_bytes_per_step"] for e in record["history"]] == [2 * 4810 * 4] * 3  # two neighbours, the MLP
    assert all(e["consensus_distance"] > 0 for e in record["history"])  # a ring of 4 is not the complete graph
    assert pipeline.json("results/cluster/evaluation.json")["accuracy"] >= 0.9
    # the ring's exchanges do not depend on where the ranks run
    local = local_runs("gloo", strategy="neighbour").json("results/cluster/run.json")
    assert record["weights_sha256"] == local["weights_sha256"]
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


def test_a_users_own_model_is_checked_on_the_login_node_and_trains_on_two_nodes_to_one_machines_weights(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    # the example model folder, bound into the ranks' containers on both nodes
    model = {"code": "examples/keras-model", "build": "cnn:build", "params": {"filters": 8}}
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, model=model)
    proc = pipeline.snakemake("results/cluster/run.json", profile="testbed")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    assert "localrule check_model:" in output, output[-8000:]  # on the login node, before the job queues
    record = pipeline.json("results/cluster/run.json")
    assert [(r["rank"], r["hostname"]) for r in record["ranks"]] == [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")]
    folder = pipeline.root / "examples/keras-model"  # every file of the folder, each by its sha256
    assert record["user_code"]["files"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                                            for p in sorted(folder.glob("*.py"))}
    assert {"cnn.py", "residual.py"} <= set(record["user_code"]["files"])
    local = local_runs("gloo", model=model).json("results/cluster/run.json")
    assert record["weights_sha256"] == local["weights_sha256"]
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


def test_the_oldest_stack_trains_on_two_nodes_checked_and_deterministic(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline], oldest_image: BuiltImage) -> None:
    # the official horovod-cpu image's stack (TensorFlow 2.9, Keras 2.9, Horovod 0.28.1 with Gloo) on Debian 11's
    # Python 3.9; the digits were prepared in hvdflow-cpu (this image has no preparation libraries)
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, image="hvdflow-cpu-oldest")
    proc = pipeline.snakemake("results/cluster/evaluation.json", profile="testbed")
    assert proc.returncode == 0, proc.stderr[-8000:]
    record = pipeline.json("results/cluster/run.json")
    assert (record["image"]["name"], record["image"]["digest"]) == ("hvdflow-cpu-oldest", oldest_image.manifest_digest)
    assert [(r["rank"], r["hostname"]) for r in record["ranks"]] == [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")]
    check = {p["name"]: p for p in record["image_check"]["parts"]}
    assert record["image_check"]["ok"], record["image_check"]
    assert check["python"]["found"].startswith("3.9.") and check["tensorflow"]["found"] == "2.9.3"
    assert check["tf.keras"]["found"].startswith("2.9.") and check["horovod gloo"]["found"] == "built"
    assert pipeline.json("results/cluster/evaluation.json")["accuracy"] >= 0.9
    # deterministic there too: the same weights on one machine (another launch, another placement of the ranks)
    local = local_runs("gloo", image="hvdflow-cpu-oldest").json("results/cluster/run.json")
    assert record["weights_sha256"] == local["weights_sha256"]
    # TensorFlow 2.9 answers whether oneDNN runs at build time; the record gives the run-time answer, as 2.15's does
    newer = local_runs("gloo").json("results/cluster/run.json")
    assert record["numerics"]["onednn_enabled"] == newer["numerics"]["onednn_enabled"] is not None
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


def test_pytorch_trains_on_two_nodes_with_horovod_and_ddp_and_horovods_weights_are_one_machines(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        torch_image: BuiltImage) -> None:
    # 4 PyTorch ranks on 2 nodes: Horovod's PyTorch API, and DDP started by hvdflow's rank tasks (rank 0's TCPStore
    # published in the job's rendezvous server on the cluster network)
    torch = {**CLUSTER_EXPERIMENT, "image": "hvdflow-torch-cpu", "framework": "pytorch"}
    pipeline = configured_pipeline(hpc_user, registry, udocker_dir, prepared,
                                   experiments={"hvd": {**torch, "distributed": "horovod"},
                                                "ddp": {**torch, "distributed": "ddp"}})
    proc = pipeline.snakemake("results/hvd/evaluation.json", "results/ddp/evaluation.json", profile="testbed")
    assert proc.returncode == 0, proc.stderr[-8000:]
    for mode in ("hvd", "ddp"):
        record = pipeline.json(f"results/{mode}/run.json")
        assert record["image"]["digest"] == torch_image.manifest_digest and record["slurm"]["job_id"]
        assert [(r["rank"], r["hostname"]) for r in record["ranks"]] == [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")]
        assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}
        assert record["versions"]["distributed"] == {"hvd": "horovod", "ddp": "ddp"}[mode]
        assert pipeline.json(f"results/{mode}/evaluation.json")["accuracy"] >= 0.85
    # deterministic across placements: the same 4 Horovod ranks on one machine give the same weights
    local = configured_pipeline(hpc_user, registry, udocker_dir, prepared,
                                experiments={"hvd": {**torch, "distributed": "horovod", "nodes": 1}})
    proc = local.snakemake("results/hvd/run.json")
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert pipeline.json("results/hvd/run.json")["weights_sha256"] == local.json("results/hvd/run.json")["weights_sha256"]
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == [] and local.processes() == []


def test_an_uneven_layout_gets_the_planned_tasks_per_node_and_one_gpu_per_rank(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline) -> None:
    # 5 ranks on 2 nodes of 4 CPUs: without a per-node maximum Slurm packs 4 + 1, and rank 3 has no GPU of its own
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, ranks=5, epochs=1)
    proc = pipeline.snakemake("results/cluster/run.json", profile="testbed")
    assert proc.returncode == 0, proc.stderr[-8000:]
    record = pipeline.json("results/cluster/run.json")
    assert [(r["rank"], r["hostname"], r["local_rank"], r["cross_rank"]) for r in record["ranks"]] == \
        [(0, "n1", 0, 0), (1, "n1", 1, 0), (2, "n1", 2, 0), (3, "n2", 0, 1), (4, "n2", 1, 1)]
    assert record["slurm"]["tasks_per_node"] == "3,2"
    for host, count in (("n1", 3), ("n2", 2)):  # the job holds gpu:3 per node, of 4
        gpus = [r["cuda_visible_devices"] for r in record["ranks"] if r["hostname"] == host]
        assert len(set(gpus)) == count and all(g is not None and "," not in g for g in gpus), gpus


def run_in_pty(user: HpcUser, argv: list[str], cwd: Path, answers: dict[str, str], timeout: float = 300
               ) -> tuple[str, int]:
    """Run ``argv`` as ``user`` on a terminal of its own (a pty), typing each answer once its prompt (a key of
    ``answers``) shows; what the terminal showed and the exit status."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(user.argv(argv), cwd=cwd, stdin=terminal, stdout=terminal, stderr=terminal,
                            start_new_session=True)
    os.close(terminal)
    seen, pending = "", dict(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(controller, 4096).decode(errors="replace")
                except OSError:  # the command ended: the terminal is gone
                    break
                seen += chunk
                for prompt in [p for p in pending if p in seen.rsplit("\n", 1)[-1]]:
                    os.write(controller, (pending.pop(prompt) + "\n").encode())
            elif proc.poll() is not None:
                break
        return seen, proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)


ACCOUNTS = ("proj-a", "proj-b")


def _user_accounts(layout: Any, user: str) -> None:
    """Two Slurm accounts for ``user``, the first their default (as a site's administrator adds them)."""
    _admin(layout, "sacctmgr", "-i", "add", "account", ",".join(ACCOUNTS), f"cluster={tc.CLUSTER}", check=False)
    _admin(layout, "sacctmgr", "-i", "add", "user", user, f"account={','.join(ACCOUNTS)}",
           f"defaultaccount={ACCOUNTS[0]}", check=False)


def test_site_new_writes_a_profile_of_another_partition_gpu_type_and_account_that_trains_to_the_local_weights(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    # the test bed as a cluster the shipped profiles do not know: a second partition with a time limit, two GPU types
    # on each node, two accounts, a per-job $TMPDIR on the nodes' local disk, a second interface ib0 between the
    # nodes; nothing of profiles/testbed is used, and scratch and interface are found by the probe job
    _user_accounts(cluster, hpc_user.name)
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    site = pipeline.hvdflow("site", "new", "other", "--yes", f"--partition={tc.OTHER_PARTITION}", "--gpu-type=a100",
                            "--account=proj-b")
    output = site.stdout + site.stderr
    assert site.returncode == 0, output[-6000:]
    settings = yaml.safe_load((pipeline.root / "profiles/other/hvdflow.yaml").read_text())
    assert settings["slurm"] == {"scratch_dir": "$TMPDIR", "gpus_per_node": 2, "gpu_type": "a100",
                                 "signal_grace_seconds": 120}, settings
    assert (settings["network_interface"], settings["runtime"]["execmode"]) == (tc.FAST_INTERFACE, "auto"), settings
    assert settings["registry"] == "${HVDFLOW_REGISTRY}", settings  # the user's variable, read each run
    resources = yaml.safe_load((pipeline.root / "profiles/other/config.yaml").read_text())
    assert resources["default-resources"]["slurm_account"] == "proj-b"
    assert resources["set-resources"]["train"]["slurm_partition"] == tc.OTHER_PARTITION
    assert resources["set-resources"]["train"]["runtime"] == 240  # the partition's limit, 4:00:00
    assert resources["set-resources"]["train"]["cpus_per_task"] == 2  # 4 cores, 2 a100 per node
    text = (pipeline.root / "profiles/other/hvdflow.yaml").read_text()
    assert "# --gpu-type; sinfo: 2 per node on 2 of accel's nodes" in text, text
    # a probe job of two nodes: the second reached the first on both interfaces; ib0 is taken before eth0
    assert re.search(r"network_interface: \"ib0\" +# probe job: n\d reached n\d on eth0, ib0 of eth0 10\.213\.47\.1\d, "
                     r"ib0 10\.213\.48\.1\d", text), text
    # doctor ran with the new profile, every check passed, the node job on the other partition with the GPU type
    assert "hvdflow site new: hvdflow doctor --profile other" in site.stdout, output[-6000:]
    assert re.search(r"gpus +accel's nodes have gpu:a100:2 on 2 nodes, gpu:h100:2 on 2 nodes; the profile uses 2 "
                     r"a100 per node", site.stdout), site.stdout
    assert re.search(r"\d+ ok, \d+ warnings, 0 failures", site.stdout), site.stdout

    # the profile keeps the plugin's status polling for a real controller (first check after 40 s); a test bed answers
    # at once
    proc = pipeline.snakemake("results/cluster/run.json", "--slurm-init-seconds-before-status-checks=2",
                              "--seconds-between-status-checks=2", profile="other")
    assert proc.returncode == 0, proc.stderr[-8000:]
    record = pipeline.json("results/cluster/run.json")
    assert record["weights_sha256"] == local_runs("gloo").json("results/cluster/run.json")["weights_sha256"]
    # srun no longer takes the job's --cpus-per-task on its own (Slurm 22.05): hvdflow passes it with the profile's
    # --cpu-bind, and each rank runs that many threads (the test bed's task/none plugin itself binds nothing)
    assert sorted((r["hostname"], r["threads"]) for r in record["ranks"]) == [("n1", 2)] * 2 + [("n2", 2)] * 2
    allocation = record["slurm"]["allocation"]  # learnt from the controller: the plugin's job step hides it
    assert (allocation["cpus_per_task"], allocation["partition"]) == ("2", tc.OTHER_PARTITION), allocation
    logs = pipeline.root / "logs" / "train" / "cluster"
    srun = (logs / "srun.log").read_text().splitlines()[0].split()
    assert {"--cpus-per-task=2", "--cpu-bind=cores", "--gres=gpu:a100:2"} <= set(srun), srun
    rank_log = (logs / "rank-1.log").read_text()
    assert "SLURM_CPUS_PER_TASK=2, SLURM_CPU_BIND=" in rank_log
    assert re.search(rf"Gloo rendezvous {re.escape(cluster.fast_addr('n1'))}:\d+ over {tc.FAST_INTERFACE}", rank_log)
    job = record["slurm"]["job_id"]
    accounted = hpc_user.run(["sacct", "-X", "-n", "-P", "-j", str(job), "-o", "Account,Partition,AllocTRES"], check=True)
    account, partition, tres = accounted.stdout.strip().splitlines()[0].split("|")
    assert (account, partition) == ("proj-b", tc.OTHER_PARTITION) and "gres/gpu:a100=4" in tres, accounted.stdout
    assert not node_scratch_leftovers(cluster)
    deadline = time.monotonic() + 60  # the epilog removes each job's $TMPDIR once the job has ended
    while any(list(cluster.node_job_tmp(n).iterdir()) for n in cluster.node_names) and time.monotonic() < deadline:
        time.sleep(1)
    assert not [p for n in cluster.node_names for p in cluster.node_job_tmp(n).iterdir()]


def test_site_new_refuses_a_gpu_type_no_node_has_and_asks_on_a_terminal(cluster: Any, hpc_user: HpcUser,
                                                                        user_tmp: Path) -> None:
    _user_accounts(cluster, hpc_user.name)
    tree = hpc_user.mkdir(user_tmp / "tree")
    site_new = [str(hpc_user.venv / "bin" / "python"), "-m", "hvdflow", "site", "new"]
    # no registry given and none in the environment: refused before Slurm is asked anything
    refused = hpc_user.run([*site_new, "wrong", "--no-doctor"], cwd=tree)
    assert refused.returncode == 1 and "no --registry given and $HVDFLOW_REGISTRY is not set" in refused.stderr
    assert "partition" not in refused.stderr and not (tree / "profiles").exists(), refused.stderr
    # without a terminal nothing is asked (stdin is /dev/null here): the defaults are taken and said
    refused = hpc_user.run([*site_new, "wrong", "--gpu-type=v100", "--no-doctor", "--registry=none"], cwd=tree)
    assert refused.returncode == 1, refused.stderr
    assert "--gpu-type v100: no node of debug has it; its GPUs: up, 2 nodes, gpu:a100:2 on 2 nodes, gpu:h100:2 on 2 " \
           "nodes" in refused.stderr, refused.stderr
    assert "the training partition: debug (" in refused.stderr and "--partition sets another" in refused.stderr
    assert not (tree / "profiles").exists() or not list((tree / "profiles").iterdir())
    # on a terminal: the partition, the GPU type and the account are asked, the defaults marked
    answers = {"the training partition [": "2", "the GPU type in accel [": "", "the account [": "proj-b"}
    seen, status = run_in_pty(hpc_user, [*site_new, "asked", "--no-doctor", "--registry=http://127.0.0.1:5000"],
                              tree, answers)
    assert status == 0, seen[-4000:]
    assert "1) debug: " in seen and "[default]" in seen and "2) accel: " in seen, seen[-4000:]
    assert "1) any: any type, up to 4 per node  [default]" in seen and "2) a100: 2 per node on 2 nodes" in seen
    settings = yaml.safe_load((tree / "profiles/asked/hvdflow.yaml").read_text())
    assert settings["slurm"]["gpus_per_node"] == 4 and "gpu_type" not in settings["slurm"], settings
    assert settings["registry"] == "http://127.0.0.1:5000", settings
    resources = yaml.safe_load((tree / "profiles/asked/config.yaml").read_text())
    assert resources["default-resources"]["slurm_account"] == "proj-b"
    assert resources["set-resources"]["train"]["slurm_partition"] == tc.OTHER_PARTITION
    assert not [p for p in (tree / "profiles").iterdir() if p.name.startswith(".")]  # no staging folder left
    assert not hpc_user.run(["squeue", "--noheader", "--name=hvdflow-site-*", "--me"]).stdout.strip()


def test_a_rank_killed_on_one_node_is_named_and_the_retry_resumes_to_the_same_weights(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    started = time.time()
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    proc = pipeline.snakemake("results/cluster/run.json", "--retries", "1", profile="testbed",
                              extra_env={"HVDFLOW_INJECT_RANK_FAILURE": "3:2.3:kill:once"})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    assert "rank 3 on n2 failed" in output and "logs/train/cluster/rank-3.log" in output, output[-6000:]
    assert "list_dataset" not in output, output[-6000:]  # the prepared dataset, reused
    record = pipeline.json("results/cluster/run.json")
    assert record["weights_sha256"] == local_runs("gloo").json("results/cluster/run.json")["weights_sha256"]
    first, second = record["attempts"]
    assert first["outcome"] == "failed" and "rank 3 on n2 failed" in first["error"], first
    assert first["slurm_job_id"] != second["slurm_job_id"]  # a new job: Snakemake's retry
    assert (second["outcome"], second["from"]) == ("completed", "epoch 1 step 0")
    logs = pipeline.root / "logs/train/cluster"
    assert "failing on purpose (kill) at step 3 of epoch 2" in (logs / "rank-3.log").read_text()  # both attempts kept
    assert "resuming from checkpoint ckpt-10 at epoch 1 step 0" in (logs / "rank-0.log").read_text()
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == [], "a rank or the rendezvous server outlived a job"
    # the killed rank's AutoGraph files and its udocker's went to the job's tmp on n2's scratch, removed with it
    assert tmp_leftovers(hpc_user.uid, started) == []


def _start_and_wait_for(pipeline: Pipeline, line: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start Snakemake on the test bed; once rank 0 has logged ``line``, the running Snakemake and the job's id."""
    running = pipeline.start_snakemake("results/cluster/run.json", *args, profile="testbed")
    rank0 = pipeline.root / "logs/train/cluster/rank-0.log"
    deadline = time.monotonic() + 900
    while line not in (rank0.read_text(errors="replace") if rank0.exists() else ""):
        assert running.poll() is None and time.monotonic() < deadline, Pipeline.finish(running).stderr[-6000:]
        time.sleep(0.1)
    return running, pipeline.json("results/cluster/checkpoints/attempts.json")[0]["slurm_job_id"]


@contextlib.contextmanager
def switched_bed(cluster: Any, **changes: Any) -> Iterator[Any]:
    """The test bed restarted with ``changes`` to its layout, and restarted as it was afterwards."""
    switched = dataclasses.replace(cluster, **changes)
    testbed.stop(cluster)
    try:
        testbed.start(switched)
        yield switched
    finally:
        testbed.stop(switched)
        testbed.start(cluster)


@pytest.fixture
def cgroup_bed(cluster: Any) -> Iterator[Any]:
    """The test bed switched to proctrack/cgroup (a freezer cgroup per step; a signal other than SIGKILL reaches only
    each task's top process, as on most production clusters) for one test, and back to linuxproc after it.

    The signal path under linuxproc (every process of a task signalled) is the SIGTERM test's."""
    with switched_bed(cluster, proctrack="cgroup") as switched:
        yield switched
    assert not any(switched.freezer_dir(node).exists() for node in switched.node_names), "stop left a cgroup behind"


def test_usr1_to_the_training_job_checkpoints_requeues_it_and_resumes_to_the_same_weights(
        cgroup_bed: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    config = hpc_user.run(["scontrol", "show", "config"], check=True).stdout
    assert "proctrack/cgroup" in config
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    # as soon as the trainer runs: a stop signal is kept from then on, and acted on after the first step
    running, job = _start_and_wait_for(pipeline, "hvdflow: starting from scratch")
    hpc_user.run(["scancel", "--signal=USR1", job], check=True)  # as Slurm does --signal=USR1@grace before the limit
    proc = Pipeline.finish(running)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    record = pipeline.json("results/cluster/run.json")
    assert record["weights_sha256"] == local_runs("gloo").json("results/cluster/run.json")["weights_sha256"]
    first, second = record["attempts"]
    assert (first["outcome"], first["slurm_job_id"], first["slurm_restart_count"]) == (
        "stopped on a signal after a checkpoint", job, 0)
    assert (second["outcome"], second["slurm_job_id"], second["slurm_restart_count"]) == ("completed", job, 1)
    assert second["from"] == first["to"] != "the start"
    # the rule's log (Snakemake clears it for each run of the job) names the earlier attempt; the job's own log, which
    # Slurm appends to across the restart, has both runs, and the requeue that ended the first (under proctrack/cgroup
    # Slurm ends every process of the job at once, the rule's own message included)
    log = (pipeline.root / "logs/train/cluster.log").read_text()
    assert (f"hvdflow: attempt 1 (Slurm job {job}, restart 0): the start -> {first['to']}: stopped on a signal after a "
            "checkpoint") in log and "hvdflow: resuming from checkpoint ckpt-" in log, log
    job_log = (pipeline.root / f".snakemake/slurm_logs/rule_train/cluster/{job}.log").read_text()
    assert f"*** JOB {job} ON n1 CANCELLED AT" in job_log and "DUE TO JOB REQUEUE ***" in job_log, job_log[-3000:]
    assert job_log.count("localrule train:") == 2
    # Snakemake saw one job that ran twice: reported once, its checkpoints kept
    assert output.count("rule train:") == 1, output[-8000:]
    manifest = pipeline.json("results/cluster/checkpoints/manifest.json")
    folder = pipeline.root / "results/cluster/checkpoints"
    assert manifest["finished"] and all((folder / f).exists() for c in manifest["checkpoints"] for f in c["files"])
    # the rank task, the top process of its Slurm task, passed the signal on to the trainer in the container: under
    # proctrack/cgroup nothing else reaches it
    rank_log = (pipeline.root / "logs/train/cluster/rank-2.log").read_text()
    assert "forwarding SIGUSR1 to the rank" in rank_log and "on signal SIGUSR1" in rank_log, rank_log[-3000:]
    assert not node_scratch_leftovers(cgroup_bed)
    assert pipeline.processes_left() == []


def test_sigterm_to_every_process_of_the_job_is_saved_within_killwait_and_the_run_resumes(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    # a time limit without warning, or a preemption: SIGTERM to every process of the job (the batch shell, the inner
    # Snakemake and srun too), which srun follows with SIGKILL to the step KillWait + 2 s (7 s here) later. Sent
    # after the first epoch (6 in all), so that training is under way and ends after the kill would come.
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, epochs=6)
    running, job = _start_and_wait_for(pipeline, "hvdflow: epoch 1/6", "--retries", "1")
    hpc_user.run(["scancel", "--full", "--signal=TERM", job], check=True)
    proc = Pipeline.finish(running)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    record = pipeline.json("results/cluster/run.json")
    assert record["weights_sha256"] == local_runs("gloo", 6).json("results/cluster/run.json")["weights_sha256"]
    first, second = record["attempts"]
    assert first["outcome"] in ("stopped on a signal after a checkpoint", KILLED), first
    assert second["outcome"] == "completed" and second["from"] != "the start"
    assert "on signal SIGTERM; exiting with status 75" in (pipeline.root / "logs/train/cluster/rank-0.log").read_text()
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


TIME_LIMIT_EPOCHS = 20
TIME_LIMIT_SLOW_STEPS = "0.3"
"""Epochs of the time-limit test, and the seconds each step sleeps in its cluster run: about 10 steps an epoch make
3.3-4 s an epoch, 66 s or more in all, on an idle machine as on a loaded one. A run of the job warned 45-75 s in,
20 s or more of them starting up, trains at most 55 s: the run needs at least 2 runs of the job, typically 2-3.
(Unslowed, 120 epochs took 2 runs on an idle machine and 8 runs, 870 s, beside the other lane in CI.)"""


def test_a_time_limit_shorter_than_the_run_warns_checkpoints_and_requeues_until_done_to_the_same_weights(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
        local_runs: Callable[..., Pipeline]) -> None:
    # Slurm's own time limit, not a signal sent by hand. Its shortest is one minute, and slurmctld checks limits and
    # sends --signal's warning only every 30 s: a job warned `grace` seconds before its limit gets USR1 between
    # limit - grace - 30 s and limit - grace after its start. A 2-minute limit with USR1@45 warns each run of the job
    # 45-75 s in; 4 ranks need about 20 s to their first step, so each run trains for at most 55 s. The steps are
    # slowed (a sleep after each), so that the run outlasts one run of the job whatever the machine's load.
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, epochs=TIME_LIMIT_EPOCHS)
    settings_file = pipeline.root / "profiles/testbed/hvdflow.yaml"
    settings_file.write_text(settings_file.read_text().replace("signal_grace_seconds: 60", "signal_grace_seconds: 45"))
    proc = pipeline.snakemake("results/cluster/run.json", "--set-resources", "train:runtime=2", "--retries", "2",
                              profile="testbed", extra_env={"HVDFLOW_INJECT_SLOW_STEPS": TIME_LIMIT_SLOW_STEPS})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    record = pipeline.json("results/cluster/run.json")
    job = record["attempts"][0]["slurm_job_id"]
    shown = hpc_user.run(["scontrol", "show", "job", "--oneliner", job], check=True).stdout
    assert "TimeLimit=00:02:00" in shown, shown
    expected = local_runs("gloo", TIME_LIMIT_EPOCHS).json("results/cluster/run.json")["weights_sha256"]
    assert record["weights_sha256"] == expected
    *stopped, last = record["attempts"]
    assert stopped, f"the run ended within one run of the job: {record['attempts']}"
    assert last["outcome"] == "completed", record["attempts"]
    for before, after in zip(record["attempts"], record["attempts"][1:]):
        assert before["outcome"] == "stopped on a signal after a checkpoint", record["attempts"]
        assert after["from"] == before["to"] != "the start", record["attempts"]
        # requeued by hvdflow: the same job, one restart more (a job Slurm itself ended would be retried as a new one)
        assert after["slurm_job_id"] == before["slurm_job_id"], record["attempts"]
        assert after["slurm_restart_count"] == before["slurm_restart_count"] + 1, record["attempts"]
    rank0 = (pipeline.root / "logs/train/cluster/rank-0.log").read_text()
    assert rank0.count("on signal SIGUSR1; exiting with status 75") == len(stopped), rank0[-3000:]
    assert output.count("rule train:") == 1, output[-8000:]  # one job for Snakemake, however often Slurm restarted it
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


ORPHAN_PROGRAM = """
import signal, subprocess, sys, time
from hvdflow.slurm.batch_shell import end_with_batch_shell
signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM ignored", flush=True))  # as Snakemake's handler can hang
print("watching", end_with_batch_shell(), flush=True)
if sys.argv[1] == "first":  # the rule's Snakemake, started through `sh -c` as the job step executor does
    subprocess.Popen(["sh", "-c", f"{sys.executable} {sys.argv[0]} second"])
time.sleep(600)
"""


def test_the_snakemakes_of_a_job_end_after_killwait_once_slurm_has_ended_their_batch_shell(
        cluster: Any, hpc_user: HpcUser) -> None:
    # the job's processes as the Slurm plugin starts them: the batch shell, a Python ignoring SIGTERM (Snakemake's
    # handler can hang on a lock), and one it starts through `sh -c`. Under proctrack/linuxproc Slurm's SIGKILL does
    # not reach them once the shell is gone (the CI failure at 1b200d6); batch_shell ends them KillWait + 10 s later.
    folder = hpc_user.mkdir(hpc_user.tests_dir / f"batch-shell-{time.monotonic_ns()}")
    (folder / "job.py").write_text(ORPHAN_PROGRAM)
    script = folder / "job.sh"
    script.write_text(f"#!/bin/sh\nexec 2>&1\n{hpc_user.venv}/bin/python {folder}/job.py first\n")
    script.chmod(0o755)
    job = hpc_user.run(["sbatch", "--parsable", "-o", str(folder / "job.log"), str(script)], check=True).stdout.strip()
    pythons = str(folder / "job.py")
    log_file, deadline = folder / "job.log", time.monotonic() + 60

    def started() -> bool:  # python, sh -c, python (Slurm runs its own copy of job.sh), each Python's handler set (it
        # prints "watching" after): a SIGTERM before that ended the second one under load (a failure at d51c665)
        return len(processes_naming(folder)) == 3 and log_file.exists() and log_file.read_text().count("watching ") == 2
    while not started() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert started(), (processes_naming(folder), log_file.read_text() if log_file.exists() else "no log")
    hpc_user.run(["scancel", job], check=True)
    cancelled = time.monotonic()
    time.sleep(5 + 3)  # past the test bed's KillWait: Slurm has done all it does
    left = [p for p in processes_naming(folder) if "python" in p]
    assert len(left) == 2, f"Slurm ended them itself: the test no longer shows the case: {left}"
    while processes_naming(pythons) and time.monotonic() < cancelled + 90:
        time.sleep(0.5)
    log = (folder / "job.log").read_text()
    assert processes_naming(folder) == [], log
    assert "SIGTERM ignored" in log, log
    watched = {line.split()[1] for line in log.splitlines() if line.startswith("watching ")}
    assert len(watched) == 1 and "None" not in watched and log.count("watching ") == 2, log  # the one batch shell


def test_doctor_checks_a_compute_node_through_one_slurm_job_and_names_each_failure_made_real(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline) -> None:
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    digest = pipeline.json("resources/images/hvdflow-cpu.json")["digest"]
    profile_dir = pipeline.root / "profiles" / "testbed"
    settings, resources = (profile_dir / "hvdflow.yaml").read_text(), (profile_dir / "config.yaml").read_text()

    def doctor(**env: str) -> tuple[int, dict[str, dict[str, str]]]:
        proc = pipeline.hvdflow("doctor", "--profile", "testbed", "--json", extra_env=env)
        report = json.loads(proc.stdout)
        assert report["exit_status"] == proc.returncode, proc.stdout + proc.stderr
        assert doctor_jobs(hpc_user) == []
        return proc.returncode, {f["check"]: f for f in report["findings"]}

    status, found = doctor()
    assert status == 0, found
    assert found["node job"]["status"] == "ok" and found["node job"]["detail"] in ("ran on n1", "ran on n2"), found
    assert found["node gpus"]["status"] == "warning" and "Slurm gave 4 GPUs" in found["node gpus"]["detail"]  # no driver
    assert found["node scratch"]["status"] == "ok" and "/var/lib/hvdflow-testbed/scratch writable" in \
        found["node scratch"]["detail"] and "the largest dataset" in found["node scratch"]["detail"], found
    assert found["node sees udocker directory"]["status"] == "ok", found
    assert found["node network"]["status"] == "ok" and "eth0" in found["node network"]["detail"], found
    assert found["image hvdflow-cpu"]["status"] == "ok" and digest in found["image hvdflow-cpu"]["detail"], found
    assert found["proot"]["status"] == "ok" and "opt/hvdflow/bin/proot runs commands" in found["proot"]["detail"]
    assert found["gpus"]["status"] == "ok" and found["partition"]["detail"].startswith("debug: up, 2 nodes"), found
    assert found["image builds"]["status"] == "ok" and found["image builds"]["detail"].startswith("without root"), found
    assert not list(udocker_dir.glob(".hvdflow-doctor-*"))  # the probe file the node read is gone

    (profile_dir / "config.yaml").write_text(resources.replace("slurm_partition: debug", "slurm_partition: gpu-nope"))
    status, found = doctor()
    assert status == 1 and found["partition"]["status"] == "failure" and "gpu-nope" in found["partition"]["detail"]
    assert found["node job"]["status"] == "warning" and "not submitted" in found["node job"]["detail"], found
    (profile_dir / "config.yaml").write_text(resources)

    (profile_dir / "hvdflow.yaml").write_text(settings.replace("gpus_per_node: 4", "gpus_per_node: 8"))
    status, found = doctor()
    assert status == 1 and found["gpus"]["status"] == "failure", found
    assert "counts 8 GPUs per node" in found["gpus"]["detail"] and "gpus_per_node: 4" in found["gpus"]["fix"], found
    assert found["node job"]["status"] == "failure" and "srun exited 1" in found["node job"]["detail"], found

    (profile_dir / "hvdflow.yaml").write_text(settings.replace("scratch_dir: /var/lib/hvdflow-testbed/scratch",
                                                               "scratch_dir: /var/lib/hvdflow-testbed/etc"))
    status, found = doctor(HVDFLOW_REGISTRY="http://127.0.0.1:9")
    assert status == 1, found
    assert found["node scratch"]["status"] == "failure" and "/var/lib/hvdflow-testbed/etc is not writable" in \
        found["node scratch"]["detail"], found
    assert found["image hvdflow-cpu"]["status"] == "failure" and "127.0.0.1:9 is not reachable" in \
        found["image hvdflow-cpu"]["detail"], found


def doctor_jobs(user: HpcUser) -> list[str]:
    """The doctor's node jobs in Slurm's queue (any state)."""
    names = user.run(["squeue", "--noheader", "--format=%j"], check=True).stdout.split()
    return [name for name in names if name.startswith("hvdflow-doctor")]


def test_doctor_streams_its_findings_names_a_drained_partition_and_a_waiting_job_and_leaves_nothing_queued(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline) -> None:
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    nodes = hpc_user.run(["sinfo", "--noheader", "--partition=debug", "--format=%N"], check=True).stdout.strip()

    def doctor(*args: str) -> tuple[int, dict[str, dict[str, str]], str]:
        proc = pipeline.hvdflow("doctor", "--profile", "testbed", "--json", *args)
        report = json.loads(proc.stdout)
        return proc.returncode, {f["check"]: f for f in report["findings"]}, proc.stderr

    # every node drained: the partition is up, but none of its nodes can run a job; no job is submitted
    _admin(cluster, "scontrol", "update", f"nodename={nodes}", "state=drain", "reason=hvdflow-doctor-test")
    try:
        status, found, _ = doctor()
    finally:
        _admin(cluster, "scontrol", "update", f"nodename={nodes}", "state=resume")
    assert status == 1 and found["partition"]["status"] == "failure", found
    assert found["partition"]["detail"] == "debug: up, 2 nodes, none of which can run a job (2 drained)", found
    assert "not submitted" in found["node job"]["detail"] and doctor_jobs(hpc_user) == []

    # a job that cannot start: every node held by another job of the user's
    blocker = hpc_user.run(["sbatch", "--parsable", "--partition=debug", "--nodes=2", "--exclusive", "--time=10",
                            "--job-name=blocker", "--output=/dev/null", "--wrap", "sleep 600"], check=True).stdout.strip()
    try:
        deadline = time.monotonic() + 120
        while hpc_user.run(["squeue", "--noheader", f"--jobs={blocker}", "--format=%T"]).stdout.strip() != "RUNNING":
            assert time.monotonic() < deadline, "the blocking job never started"
            time.sleep(1)
        argv = pipeline._as_user([str(hpc_user.venv / "bin" / "python"), "-m", "hvdflow", "doctor", "--profile",
                                  "testbed", "--wait", "300"], {})
        started = time.monotonic()
        waiting = subprocess.Popen(argv, cwd=pipeline.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            first = waiting.stdout.readline()  # type: ignore[union-attr]
            assert first.startswith("OK ") and "python" in first and waiting.poll() is None, first  # as it is made
            said = waiting.stderr.readline()  # type: ignore[union-attr]
            assert re.search(r"node job \d+ still waits in the queue after 3\d s \(Slurm's reason: (Resources|Priority)"
                             r"\); the limit is 300 s", said), said
            # SIGTERM to the doctor alone (not its srun): it cancels its job and says so
            interpreter = f"{hpc_user.venv / 'bin' / 'python'} -m hvdflow doctor --profile testbed"
            python = [p for p in processes_naming(Path("hvdflow")) if p.split(": ", 1)[1].startswith(interpreter)]
            pids = [int(line.split(":")[0]) for line in python]
            assert len(pids) == 1, python
            subprocess.run(["kill", "-TERM", str(pids[0])], check=True)
            out, err = waiting.communicate(timeout=90)
        finally:
            if waiting.poll() is None:
                waiting.kill()
        assert waiting.returncode == 143, (out[-2000:], err[-2000:])
        assert "hvdflow doctor: stopped by SIGTERM after" in err and time.monotonic() - started < 120, err
        assert doctor_jobs(hpc_user) == [], "the doctor's job outlived it"
        # the wait limit: the job cancelled, the reason named, how to check later said
        status, found, err = doctor("--wait", "5")
        assert found["node job"]["status"] == "warning", found
        assert re.match(r"no node took the job within 5 s \(Slurm's reason: (Resources|Priority)\); it was cancelled$",
                        found["node job"]["detail"]), found["node job"]
        assert "--wait" in found["node job"]["fix"] and doctor_jobs(hpc_user) == []
    finally:
        _admin(cluster, "scancel", blocker)


def test_a_partition_that_does_not_exist_shows_slurms_reason(cluster: Any, hpc_user: HpcUser, registry: Registry,
                                                             udocker_dir: Path, prepared: Pipeline) -> None:
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    proc = pipeline.snakemake("results/cluster/run.json", "--set-resources", "train:slurm_partition=gpu-nope",
                              profile="testbed")
    assert proc.returncode != 0
    assert "invalid partition specified: gpu-nope" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-4000:]


def test_scratch_that_is_not_writable_is_named(cluster: Any, hpc_user: HpcUser, registry: Registry,
                                               udocker_dir: Path, prepared: Pipeline) -> None:
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared)
    profile = pipeline.root / "profiles" / "testbed" / "hvdflow.yaml"
    profile.write_text(profile.read_text().replace("scratch_dir: /var/lib/hvdflow-testbed/scratch",
                                                   "scratch_dir: /var/lib/hvdflow-testbed/etc"))
    proc = pipeline.snakemake("results/cluster/run.json", profile="testbed")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "node-local scratch /var/lib/hvdflow-testbed/etc on " in output and "is not writable" in output, \
        output[-6000:]
    assert not (pipeline.root / "results" / "cluster" / "run.json").exists()


def test_stop_removes_only_what_start_made_and_start_is_idempotent(cluster: Any) -> None:
    def ip(*args: str) -> str:
        return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout

    def etc_slurm() -> dict[str, str]:
        return {str(p): p.read_text() if p.is_file() else "<dir>" for p in sorted(testbed.ETC_SLURM.rglob("*"))}

    conf = testbed.ETC_SLURM / "slurm.conf"
    subprocess.run(["ip", "link", "add", "hvdtb-foreign", "type", "bridge"], check=True)
    try:
        testbed.stop(cluster)
        assert not any(testbed.status(cluster).values())
        assert "hvdtb0" not in ip("link") and "hvdtb-n1" not in ip("netns")
        assert "hvdtb-foreign" in ip("link")  # not the test bed's: left alone
        conf.write_text("# a site's own slurm.conf\n")
        before = etc_slurm()
        testbed.start(cluster)
        testbed.start(cluster)  # idempotent: everything already runs
        assert all(testbed.status(cluster).values()) and testbed.nodes_idle(cluster)
        assert etc_slurm() == before, "the test bed wrote into the machine's /etc/slurm"
        # the nodes read the test bed's configuration at the default path, inside their own mount namespace
        job = subprocess.run(["srun", "--nodes=1", "cat", str(conf)], capture_output=True, text=True, check=True,
                             env=testbed.client_env(cluster))
        assert "ClusterName=hvdflow-testbed" in job.stdout
        testbed.stop(cluster)
        assert etc_slurm() == before
    finally:
        subprocess.run(["ip", "link", "del", "hvdtb-foreign"], check=False)
        conf.unlink(missing_ok=True)
        testbed.start(cluster)


def test_a_bigearthnet_folder_is_prepared_and_trained_through_slurm(cluster: Any, hpc_user: HpcUser,
                                                                    registry: Registry, udocker_dir: Path) -> None:
    from conftest import _chown_tree
    from dataset_files import write_ben_v1

    base = hpc_user.tests_dir / "raw-slurm"
    raw = write_ben_v1(base, 60, seed=9)
    _chown_tree(base, hpc_user.uid, hpc_user.gid)
    pipeline = Pipeline(hpc_user, registry, udocker_dir)
    config_file = pipeline.root / "config" / "config.yaml"
    config_file.write_text(yaml.safe_dump({
        "datasets": {"ben": {"source": "bigearthnet-v1", "path": str(raw.root), "image": "hvdflow-cpu", "chunks": 2,
                             "seasonal_snow_list": str(raw.snow_list), "cloud_shadow_list": str(raw.cloud_list),
                             "validation_fraction": 0.2, "test_fraction": 0.25, "seed": 3, "shard_size_mb": 1}},
        "experiments": {"ben": {"dataset": "ben", "image": "hvdflow-cpu", "ranks": 2, "nodes": 2, "model": "small-cnn",
                                "hidden_units": 32, "epochs": 12, "batch_size": 4, "learning_rate": 0.01}}}))
    proc = pipeline.snakemake(profile="testbed")
    assert proc.returncode == 0, proc.stderr[-8000:]
    output = proc.stdout + proc.stderr
    for rule in ("list_dataset", "prepare_chunk", "train", "evaluate"):   # run as Slurm jobs, not on the login node
        assert f"rule {rule}:" in output and f"localrule {rule}:" not in output, rule
    index = pipeline.json("resources/datasets/ben/index.json")
    assert index["excluded"] == {"seasonal_snow": 1, "cloud_or_shadow": 1, "no_19_class_label": 1}
    assert sum(s["records"] for s in index["splits"].values()) == 60
    record = pipeline.json("results/ben/run.json")
    assert sorted(r["hostname"] for r in record["ranks"]) == ["n1", "n2"]
    assert {host: part["bytes"] > 0 for host, part in record["slurm"]["staging"].items()} == {"n1": True, "n2": True}
    evaluation = pipeline.json("results/ben/evaluation.json")
    assert evaluation["micro"]["f1"] >= 0.8, evaluation["micro"]
    assert node_scratch_leftovers(cluster) == []


def test_the_benchmark_runs_each_measurement_as_a_slurm_job_on_one_and_two_nodes(
        cluster: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline) -> None:
    pipeline = benchmark_pipeline(hpc_user, registry, udocker_dir, prepared, ranks=[2], nodes=[1, 2])
    proc = pipeline.snakemake("benchmark", profile="testbed")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    assert output.count("rule benchmark_measure:") == 4, output[-8000:]  # mlp and allreduce, on 1 and on 2 nodes
    table = read_table(pipeline)
    for nodes in (1, 2):
        measured = pipeline.json(f"results/benchmark/measurements/mlp-r2-n{nodes}-udocker-0.json")
        hosts = [r["hostname"] for r in measured["per_rank"]]
        assert len(set(hosts)) == nodes and set(hosts) <= {"n1", "n2"}, hosts  # 2 ranks on one node, or one on each
        assert float(table[("mlp", 2, nodes, "udocker", "samples_per_second", 0)]["mean"]) > 0
        # from the job's start (Slurm's StartTime, whole seconds) the batch step's Snakemake and the staging come first
        assert measured["job_start_to_first_step_seconds"] > measured["seconds_to_first_step"] - 1
        assert float(table[("allreduce", 2, nodes, "udocker", "bus_bandwidth_bytes_per_second", 2 ** 20)]["mean"]) > 0
    # across nodes the raw TCP stream goes to the last rank's node over the network Gloo uses
    crossing = pipeline.json("results/benchmark/measurements/allreduce-r2-n2-udocker-0.json")
    assert crossing["tcp"]["address"][0] == cluster.node_addr("n2"), crossing["tcp"]
    assert not node_scratch_leftovers(cluster)
    assert pipeline.processes_left() == []


@pytest.fixture
def three_nodes(cluster: Any) -> Iterator[Any]:
    """The test bed with a third node for one test (elastic runs lose and regain nodes), and back to two after it."""
    with switched_bed(cluster, nodes=3) as bigger:
        yield bigger


def _admin(layout: Any, *argv: str, check: bool = True) -> None:
    """An administrator's Slurm command on the test bed."""
    subprocess.run(list(argv), env=testbed.client_env(layout), check=check, capture_output=True, text=True, timeout=60)


def _wait_for_epoch(pipeline: Pipeline, epoch: int, running: subprocess.Popen[str]) -> None:
    """Until rank 0 of the elastic run has logged the end of ``epoch`` (the membership file)."""
    membership = pipeline.root / "logs/train/cluster/membership.jsonl"
    deadline = time.monotonic() + 900
    while not any(json.loads(line).get("kind") == "epoch" and json.loads(line)["epoch"] >= epoch
                  for line in (membership.read_text().splitlines() if membership.exists() else [])):
        assert running.poll() is None and time.monotonic() < deadline, Pipeline.finish(running).stderr[-6000:]
        time.sleep(0.2)


def test_an_elastic_run_on_three_nodes_survives_a_killed_rank_a_node_down_a_drain_and_falls_back_below_min_ranks(
        three_nodes: Any, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline) -> None:
    elastic = {"ranks": 3, "nodes": 3, "elastic": {"min_ranks": 1}, "epochs": 4}
    pipeline = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, **elastic)
    profile = pipeline.root / "profiles/testbed/hvdflow.yaml"
    profile.write_text(profile.read_text() + "elastic_cooldown_seconds: 3600\n")
    # rank 2 killed 3 steps into epoch 3: the others roll back to epoch 2's end and finish on two nodes
    proc = pipeline.snakemake("results/cluster/run.json", profile="testbed",
                              extra_env={"HVDFLOW_INJECT_RANK_FAILURE": "2:3.3:kill:once"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    record = pipeline.json("results/cluster/run.json")
    first, second = record["elastic"]["memberships"]
    assert (first["ranks"], first["hosts"], second["ranks"], second["epoch"]) == (3, ["n1", "n2", "n3"], 2, 2)
    lost = (set(first["hosts"]) - set(second["hosts"])).pop()
    lost_how = r"(exited with exit code \d+( \(SIG\w+\))?|exited 0 without finishing the training .*)"
    assert re.fullmatch(rf"worker \d on {lost} {lost_how}", second["reason"]), second["reason"]
    # the same failure on one machine gives the same weights: elastic exactness does not depend on the nodes
    local = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, **{**elastic, "nodes": 1})
    local_profile = local.root / "profiles/local/hvdflow.yaml"
    local_profile.write_text(local_profile.read_text() + "elastic_cooldown_seconds: 3600\n")
    again = local.snakemake("results/cluster/run.json", extra_env={"HVDFLOW_INJECT_RANK_FAILURE": "2:3.3:kill:once"})
    assert again.returncode == 0, again.stderr[-5000:]
    assert local.json("results/cluster/run.json")["weights_sha256"] == record["weights_sha256"]
    assert not node_scratch_leftovers(three_nodes) and pipeline.processes_left() == []
    # n3 taken down by the administrator during epoch 2: the job (--no-kill) goes on without it
    down = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, **{**elastic, "epochs": 5})
    running = down.start_snakemake("results/cluster/run.json", profile="testbed")
    _wait_for_epoch(down, 1, running)
    _admin(three_nodes, "scontrol", "update", "nodename=n3", "state=down", "reason=hvdflow-elastic-test")
    try:
        finished = Pipeline.finish(running)
    finally:  # the test bed returns a node to service when its slurmd answers (ReturnToService=2): often no-op
        _admin(three_nodes, "scontrol", "update", "nodename=n3", "state=resume", check=False)
    assert finished.returncode == 0, (finished.stdout + finished.stderr)[-8000:]
    memberships = down.json("results/cluster/run.json")["elastic"]["memberships"]
    assert [(m["ranks"], m["hosts"]) for m in memberships] == [(3, ["n1", "n2", "n3"]), (2, ["n1", "n2"])], memberships
    assert "n3" in memberships[1]["reason"]
    assert len(down.json("results/cluster/run.json")["history"]) == 5
    # the nodes still in the job are cleaned; n3's copy stays until the user's next job there sweeps it
    left = node_scratch_leftovers(three_nodes)
    assert [p.parents[2].name for p in left] in ([], ["n3"]), left
    assert down.processes_left() == []
    for copy in left:
        shutil.rmtree(copy)
    # n3 drained after epoch 1: the hosts drop it (Slurm asked every 5 s), the run goes on with 2 from the next epoch
    # end; n3 resumed, it is taken back at a later one: 3 -> 2 -> 3 (60 short epochs leave the time for both:
    # here the drop came 8 epochs after the drain and the return 11 after the resume)
    drained = experiment_pipeline(hpc_user, registry, udocker_dir, prepared, **{**elastic, "epochs": 60})
    running = drained.start_snakemake("results/cluster/run.json", profile="testbed")
    _wait_for_epoch(drained, 1, running)
    _admin(three_nodes, "scontrol", "update", "nodename=n3", "state=drain", "reason=hvdflow-elastic-test")
    membership = drained.root / "logs/train/cluster/membership.jsonl"
    deadline = time.monotonic() + 300
    while '"ranks": 2' not in (membership.read_text() if membership.exists() else ""):
        assert running.poll() is None and time.monotonic() < deadline, Pipeline.finish(running).stderr[-6000:]
        time.sleep(0.2)
    _admin(three_nodes, "scontrol", "update", "nodename=n3", "state=resume")
    finished = Pipeline.finish(running)
    assert finished.returncode == 0, (finished.stdout + finished.stderr)[-8000:]
    memberships = drained.json("results/cluster/run.json")["elastic"]["memberships"]
    assert [m["ranks"] for m in memberships] == [3, 2, 3], memberships
    assert "hosts now n1 (1 slot), n2 (1 slot)" in memberships[1]["reason"], memberships[1]
    assert re.search(r"hosts now n1 \(1 slot\), n2 \(1 slot\), n3 \(1 slot\)", memberships[2]["reason"]), memberships[2]
    assert not node_scratch_leftovers(three_nodes) and drained.processes_left() == []
    # below min_ranks (n2 and n3 down, min 2): the driver gives up after elastic_timeout_seconds, the job fails, and
    # Snakemake's retry (a new job on the nodes Slurm returned to service) resumes from the last epoch's checkpoint
    fallback = experiment_pipeline(hpc_user, registry, udocker_dir, prepared,
                                   **{**elastic, "epochs": 5, "elastic": {"min_ranks": 2}})
    settings = fallback.root / "profiles/testbed/hvdflow.yaml"
    settings.write_text(settings.read_text() + "elastic_timeout_seconds: 20\n")
    running = fallback.start_snakemake("results/cluster/run.json", "--retries", "1", profile="testbed")
    _wait_for_epoch(fallback, 1, running)
    for node in ("n2", "n3"):
        _admin(three_nodes, "scontrol", "update", f"nodename={node}", "state=down", "reason=hvdflow-elastic-test")
    try:
        finished = Pipeline.finish(running)
    finally:
        for node in ("n2", "n3"):
            _admin(three_nodes, "scontrol", "update", f"nodename={node}", "state=resume", check=False)
    output = finished.stdout + finished.stderr
    assert finished.returncode == 0, output[-8000:]
    record = fallback.json("results/cluster/run.json")
    first, second = record["attempts"]
    assert first["outcome"] == "failed" and "the elastic run failed" in first["error"], first
    assert second["outcome"] == "completed" and second["from"].startswith("epoch "), second
    assert second["from"] != "the start"
    assert len(record["history"]) == 5
    for copy in node_scratch_leftovers(three_nodes):  # the nodes that left the first job keep its copy
        assert copy.parents[2].name in ("n2", "n3"), copy
        shutil.rmtree(copy)
    assert fallback.processes_left() == []
