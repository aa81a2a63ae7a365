"""PyTorch through the same workflow: the hvdflow-torch-cpu image built and pulled, the digits trained in Horovod's
PyTorch API and in PyTorch's DistributedDataParallel with 2 ranks in udocker, evaluated, recorded and rerun; a killed
rank and a stop signal resumed to the uninterrupted run's weights."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from conftest import HpcUser, Registry
from hvdflow.images.build.image import BuiltImage
from pipeline_run import Pipeline, configured_pipeline, processes_naming

pytestmark = [pytest.mark.image, pytest.mark.e2e]

TORCH = {"dataset": "digits", "image": "hvdflow-torch-cpu", "ranks": 2, "model": "mlp", "epochs": 4, "batch_size": 32,
         "learning_rate": 0.01, "framework": "pytorch"}
"""The digits MLP in PyTorch: the demo's hyperparameters, fewer epochs."""


@pytest.fixture(scope="module")
def trained(demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path,
            torch_image: BuiltImage) -> Iterator[Pipeline]:
    """The digits trained in the torch image by Horovod (``hvd``), by DistributedDataParallel (``ddp``), and the
    user's own module of ``examples/torch-model`` (``mine``)."""
    pipeline = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={
        "hvd": {**TORCH, "distributed": "horovod"}, "ddp": {**TORCH, "distributed": "ddp"},
        "mine": {**TORCH, "model": {"code": "examples/torch-model", "build": "cnn:build", "params": {"filters": 8}}}})
    proc = pipeline.snakemake()
    assert proc.returncode == 0, proc.stderr[-5000:]
    yield pipeline


def test_pytorch_trains_with_horovod_and_ddp_to_one_model_evaluates_and_records_it(
        trained: Pipeline, torch_image: BuiltImage) -> None:
    records = {mode: trained.json(f"results/{mode}/run.json") for mode in ("hvd", "ddp")}
    for mode, record in records.items():
        assert record["image"]["digest"] == torch_image.manifest_digest
        versions = record["versions"]
        assert (versions["framework"], versions["tensorflow"], versions["horovod"]) == ("torch", "none", "0.28.1")
        assert versions["torch"].startswith("2.6.0"), versions
        assert versions["distributed"] == {"hvd": "horovod", "ddp": "ddp"}[mode]
        assert versions["python_in_runtime"].startswith("3.13.")
        # every rank ended with the run's weights; each rank read its own half of the shards
        assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}
        assert [r["controller"] for r in record["ranks"]] == ["gloo", "gloo"]
        assert record["numerics"]["deterministic_algorithms"] is True
        assert set(record["outputs_sha256"]) == {f"results/{mode}/{n}" for n in ("model/model.pt", "metrics.json",
                                                                                  "history.csv")}
        parts = {p["name"]: p for p in record["image_check"]["parts"]}
        assert parts["horovod.torch"]["found"] == "imports" and parts["torch.distributed gloo"]["ok"], parts
        assert "tensorflow" not in parts
        evaluation = trained.json(f"results/{mode}/evaluation.json")
        assert evaluation["accuracy"] > 0.85, evaluation
        history = (trained.root / f"results/{mode}/history.csv").read_text().splitlines()
        assert history[0] == "epoch,accuracy,consensus_distance,loss,lr,sent_bytes_per_step,val_accuracy,val_loss"
        assert len(history) == 1 + TORCH["epochs"]
        for split in ("train", "validation"):
            assert list((trained.root / f"results/{mode}/tensorboard/{split}").glob("events.out.tfevents.*"))
    # with two ranks Horovod's average and DDP's are the same sums: one model, bit for bit
    assert records["hvd"]["weights_sha256"] == records["ddp"]["weights_sha256"]
    assert records["hvd"]["history"] == records["ddp"]["history"]
    assert trained.processes() == []


def test_a_users_own_torch_module_is_checked_trained_evaluated_and_recorded(trained: Pipeline) -> None:
    check = trained.json("results/mine/model-check.json")
    # two 3x3 convolutions of 8 filters on 1 channel, 8 x 8 x 8 flattened into 32 units, 10 logits
    assert check["parameters"] == (8 * 9 + 8) + (8 * 8 * 9 + 8) + (512 * 32 + 32) + (32 * 10 + 10), check
    assert check["input_shape"] == [1, 8, 8]
    record = trained.json("results/mine/run.json")
    assert record["user_code"]["build"] == "cnn:build" and record["user_code"]["files"], record["user_code"]
    assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}
    assert trained.json("results/mine/evaluation.json")["accuracy"] > 0.8


def test_a_pytorch_run_is_rerun_bit_identically(trained: Pipeline, hpc_user: HpcUser, user_tmp: Path) -> None:
    into = user_tmp / "rerun-torch"
    proc = hpc_user.hvdflow("rerun", str(trained.root / "results/ddp/run.json"), "--into", str(into))
    assert processes_naming(into) == []
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "verdict: identical: bit-identical weights and metrics (exit 0)" in proc.stdout


def test_a_killed_pytorch_rank_and_a_stop_signal_resume_to_the_uninterrupted_weights(
        trained: Pipeline, demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    reference = trained.json("results/hvd/run.json")
    killed = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={
        "hvd": {**TORCH, "distributed": "horovod"}})
    proc = killed.snakemake("--retries", "1", extra_env={"HVDFLOW_INJECT_RANK_FAILURE": "1:2.5:kill:once"})
    assert proc.returncode == 0, proc.stderr[-5000:]
    record = killed.json("results/hvd/run.json")
    first, second = record["attempts"]
    assert (first["outcome"], first["to"]) == ("failed", "epoch 1 step 0") and first["error"].startswith("rank 1 ")
    assert (second["from"], second["outcome"]) == ("epoch 1 step 0", "completed")
    assert record["weights_sha256"] == reference["weights_sha256"] and record["history"] == reference["history"]
    assert killed.processes() == []

    stopped = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={
        "ddp": {**TORCH, "distributed": "ddp"}})
    proc = stopped.snakemake(extra_env={"HVDFLOW_INJECT_RANK_FAILURE": "0:2.5:signal:once"})
    assert proc.returncode != 0
    assert "stopped on a signal after a checkpoint (exit status 75)" in proc.stdout + proc.stderr
    for name in ("model", "metrics.json", "run.json", "history.csv"):
        assert not (stopped.root / "results/ddp" / name).exists(), name
    assert stopped.processes() == [], "a rank, rendezvous server or proot outlived the stopped run"
    manifest = stopped.json("results/ddp/checkpoints/manifest.json")
    assert [(c["epoch"], c["step"], c["reason"]) for c in manifest["checkpoints"]][-1][:2] == (1, 5)
    assert "metric_sums" in manifest["checkpoints"][-1]["state"]  # the half epoch's sums, every rank's
    proc = stopped.snakemake()
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "resuming from checkpoint ckpt-25 at epoch 1 step 5" in (stopped.root / "logs/train/ddp.log").read_text()
    record = stopped.json("results/ddp/run.json")
    assert record["weights_sha256"] == reference["weights_sha256"] and record["history"] == reference["history"]
    assert stopped.processes() == []
