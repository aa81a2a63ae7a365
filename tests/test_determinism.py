"""The determinism matrix: for every way hvdflow trains (Keras fit, a Keras loop of the user's own, PyTorch with
Horovod's API, PyTorch with DistributedDataParallel), a model of the kind users write (BatchNormalization, a residual
block, a seeded Dropout) is killed mid-epoch (it resumes from an epoch end's checkpoint) and then stopped by the
scheduler's warning mid-epoch (it resumes from that step's checkpoint), and ends with the weights and history of the
same run never interrupted; with 2 ranks Horovod's and DDP's PyTorch runs are one model, bit for bit.

Cheap by design: the digits (8x8), 8 filters, 3 epochs, 2 ranks, only the training rules, and one Snakemake run for
the uninterrupted experiments and one (with its retries) for the interrupted ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import HpcUser, Registry
from hvdflow.images.build.image import BuiltImage
from pipeline_run import Pipeline, configured_pipeline

pytestmark = [pytest.mark.image, pytest.mark.e2e, pytest.mark.testbed_lane]

COMMON = {"dataset": "digits", "ranks": 2, "epochs": 3, "batch_size": 32, "learning_rate": 0.05}
KERAS = {**COMMON, "image": "hvdflow-cpu", "framework": "tensorflow"}
TORCH = {**COMMON, "image": "hvdflow-torch-cpu", "framework": "pytorch",
         "model": {"code": "examples/torch-model", "build": "residual:build", "params": {"filters": 8}}}
MATRIX = {
    "keras-fit": {**KERAS, "model": {"code": "examples/keras-model", "build": "residual:build", "params": {"filters": 8}}},
    "keras-loop": {**KERAS, "model": {"code": "examples/training-script", "script": "train_residual.py",
                                      "params": {"filters": 8}}},
    "torch-horovod": {**TORCH, "distributed": "horovod"},
    "torch-ddp": {**TORCH, "distributed": "ddp"},
}
"""One experiment per way of training, each with BatchNorm statistics and a Dropout mask to carry over a resume."""
INTERRUPTIONS = "1:2.4:kill:once,0:3.3:signal:once"
"""Rank 1 SIGKILLed after step 4 of epoch 2 (no checkpoint there: the retry resumes from epoch 1's end), then rank 0
told to stop (SIGUSR1, as Slurm's warning) after step 3 of epoch 3 (all ranks stop there after a checkpoint, which
the next attempt resumes from, rank 1's own BatchNorm statistics included)."""
TARGETS = [f"results/{name}/run.json" for name in MATRIX]


@pytest.fixture(scope="module")
def uninterrupted(prepared: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path,
                  torch_image: BuiltImage) -> Pipeline:
    """The matrix trained once, never interrupted."""
    pipeline = configured_pipeline(hpc_user, registry, udocker_dir, prepared, experiments=MATRIX)
    proc = pipeline.snakemake(*TARGETS)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return pipeline


def test_every_way_of_training_resumes_a_kill_and_a_stop_mid_epoch_to_the_uninterrupted_weights(
        uninterrupted: Pipeline, prepared: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    interrupted = configured_pipeline(hpc_user, registry, udocker_dir, prepared, experiments=MATRIX)
    proc = interrupted.snakemake("--retries", "2", *TARGETS, extra_env={"HVDFLOW_INJECT_RANK_FAILURE": INTERRUPTIONS})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    for name in MATRIX:
        reference, record = uninterrupted.json(f"results/{name}/run.json"), interrupted.json(f"results/{name}/run.json")
        steps = [(a["from"], a["outcome"], a["to"]) for a in record["attempts"]]
        assert steps == [("the start", "failed", "epoch 1 step 0"),
                         ("epoch 1 step 0", "stopped on a signal after a checkpoint", "epoch 2 step 3"),
                         ("epoch 2 step 3", "completed", "epoch 3 step 0")], (name, steps)
        assert record["attempts"][0]["error"].startswith("rank 1 "), (name, record["attempts"][0])
        assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}, name
        assert record["weights_sha256"] == reference["weights_sha256"], name
        if name == "keras-loop":  # the loop's own training metrics of the epoch resumed mid-way cover its last steps
            assert [{k: v for k, v in row.items() if k.startswith("val_")} for row in record["history"]] == [
                {k: v for k, v in row.items() if k.startswith("val_")} for row in reference["history"]]
            assert record["history"][:2] == reference["history"][:2], name
        else:
            assert record["history"] == reference["history"], name
    # nothing outlived the runs
    assert interrupted.processes() == [] and uninterrupted.processes() == []


def test_horovod_and_ddp_train_a_module_with_batchnorm_and_dropout_to_one_model(uninterrupted: Pipeline) -> None:
    horovod, ddp = (uninterrupted.json(f"results/torch-{mode}/run.json") for mode in ("horovod", "ddp"))
    assert (horovod["versions"]["distributed"], ddp["versions"]["distributed"]) == ("horovod", "ddp")
    assert horovod["weights_sha256"] == ddp["weights_sha256"]
    assert horovod["history"] == ddp["history"]
    assert horovod["history"][-1]["val_accuracy"] > 0.3, horovod["history"]


def test_a_users_keras_loop_and_fit_end_with_one_model_on_every_rank(uninterrupted: Pipeline) -> None:
    for name in ("keras-fit", "keras-loop"):
        record = uninterrupted.json(f"results/{name}/run.json")
        assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}, name
        history = record["history"]
        assert len(history) == COMMON["epochs"] and history[-1]["loss"] < history[0]["loss"], (name, history)
