"""A user's own Keras model, end to end as the ordinary user in udocker: the example model folder trains with 2 ranks,
is recorded file by file, evaluates, a run killed mid-training resumes to the same weights, ``hvdflow rerun`` is
identical and refuses the file that changed; bad model code is named before any training job starts."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from conftest import HpcUser, Registry, _chown_tree
from hvdflow.config.user_code import code_files, tree_sha256
from hvdflow_trainer.tfrecord import read_records as records
from pipeline_run import Pipeline, benchmark_pipeline, configured_pipeline, read_table
from test_user_reader import write_npy_folder

pytestmark = [pytest.mark.image, pytest.mark.e2e]

EXAMPLE = {"code": "mymodels", "build": "cnn:build", "params": {"filters": 8}}
"""The example model (examples/keras-model), copied to a folder git does not hold, as a user's own code is."""
MINE = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": 2, "model": EXAMPLE, "epochs": 4, "batch_size": 32,
        "learning_rate": 0.05}


def with_user_code(pipeline: Pipeline, user: HpcUser) -> Pipeline:
    """``pipeline`` with the example model copied to ``mymodels/`` (untracked), owned by the user."""
    shutil.copytree(pipeline.root / "examples/keras-model", pipeline.root / "mymodels")
    _chown_tree(pipeline.root / "mymodels", user.uid, user.gid)
    return pipeline


def test_the_example_model_trains_records_its_code_and_reruns_identically(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path, user_tmp: Path) -> None:
    whole = with_user_code(configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={"mine": MINE}),
                           hpc_user)
    proc = whole.snakemake()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    # checked in the image before the training job: built for the digits' shape and 10 classes
    check = whole.json("results/mine/model-check.json")
    assert (check["input_shape"], check["num_classes"], check["output_shape"]) == ([8, 8, 1], 10, [None, 10])
    assert output.index("rule check_model:") < output.index("rule train:")
    record = whole.json("results/mine/run.json")
    code = record["user_code"]
    example = whole.root / "mymodels/cnn.py"
    assert code["folder"] == "mymodels" and code["build"] == "cnn:build"
    assert code["files"] == {p.name: hashlib.sha256(p.read_bytes()).hexdigest()  # every file of the folder
                             for p in sorted(example.parent.glob("*.py"))}
    assert {"cnn.py", "residual.py"} <= set(code["files"])
    assert record["config"]["experiment"]["model"] == EXAMPLE
    assert len({r["weights_sha256"] for r in record["ranks"]}) == 1
    assert whole.json("results/mine/evaluation.json")["accuracy"] > 0.5
    assert whole.processes() == []
    # (a user's model killed mid-training and retried to the very same weights: tests/test_determinism.py)
    # hvdflow rerun: the code git does not hold is copied from the run's tree, checked file by file: identical
    into = user_tmp / "rerun"
    proc = hpc_user.hvdflow("rerun", str(whole.root / "results/mine/run.json"), "--into", str(into))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"model code: mymodels copied from {whole.root}, sha256 checked" in proc.stdout
    assert "verdict: identical" in proc.stdout
    # the user's file changed since the run, outside git: refused by name before any training
    example.write_text(example.read_text() + "\n# tuned\n")
    proc = hpc_user.hvdflow("rerun", str(whole.root / "results/mine/run.json"), "--into", str(user_tmp / "rerun2"))
    assert proc.returncode != 0
    assert (f"{example}: sha256 {hashlib.sha256(example.read_bytes()).hexdigest()}, but the record says "
            f"{code['files']['cnn.py']}: the model code changed since the run") in proc.stderr, proc.stderr[-3000:]
    assert "the rerun's worktree" in proc.stderr and "was removed" in proc.stderr, proc.stderr[-3000:]
    assert not (user_tmp / "rerun2").exists()  # a refused rerun leaves no worktree behind, nor git's record of it
    assert (whole.root / ".git/worktrees/rerun").is_dir() and not (whole.root / ".git/worktrees/rerun2").exists()


BAD = {
    "syntax.py": "def build(input_shape, num_classes, multi_label):\n    return (\n",
    "narrow.py": "def build(shape):\n    return None\n",
    "notmodel.py": "def build(input_shape, num_classes, multi_label):\n    return {'layers': 3}\n",
    "wrongout.py": ("import tensorflow as tf\n\ndef build(input_shape, num_classes, multi_label):\n"
                    "    inputs = tf.keras.Input(shape=input_shape)\n"
                    "    return tf.keras.Model(inputs, tf.keras.layers.Dense(3)(tf.keras.layers.Flatten()(inputs)))\n"),
    "needs.py": "import surely_not_in_the_image\n\ndef build(**kw):\n    return None\n",
    "nofn.py": "def make(**kw):\n    return None\n",
    "noisy.py": ("import tensorflow as tf\n\ndef build(input_shape, num_classes, multi_label):\n"
                 "    inputs = tf.keras.Input(shape=input_shape)\n"
                 "    noisy = tf.keras.layers.Lambda(lambda x: x + tf.random.uniform(tf.shape(x)), name='jitter')(inputs)\n"
                 "    flat = tf.keras.layers.Dropout(0.5, seed=1)(tf.keras.layers.Flatten()(noisy))\n"
                 "    return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes, 'softmax')(flat))\n"),
    "fractional.py": ("import tensorflow as tf\n\ndef build(input_shape, num_classes, multi_label):\n"
                      "    inputs = tf.keras.Input(shape=input_shape)\n"
                      "    pooled = tf.keras.layers.Lambda(\n"
                      "        lambda x: tf.nn.fractional_max_pool(x, [1.0, 1.44, 1.44, 1.0])[0])(inputs)\n"
                      "    flat = tf.keras.layers.Flatten()(pooled)\n"
                      "    return tf.keras.Model(inputs, tf.keras.layers.Dense(num_classes, 'softmax')(flat))\n"),
}
CASES = {  # experiment: (module:function, params, what the check says)
    "narrow": ("narrow:build", {}, "narrow:build(shape) cannot be called with input_shape, multi_label, num_classes"),
    "params": ("wrongout:build", {"depth": 3}, "got an unexpected keyword argument 'depth'"),
    "notmodel": ("notmodel:build", {}, "notmodel:build returned dict, not a tf.keras.Model"),
    "wrongout": ("wrongout:build", {}, "output shape is (None, 3); the dataset has 10 classes, so its last layer "
                                      "needs 10 units"),
    "needs": ("needs:build", {}, "module needs imports surely_not_in_the_image, which the image does not have"),
    "nofn": ("nofn:build", {}, "bad/nofn.py has no function build"),
    "nondeterministic": ("fractional:build", {}, "fractional:build: an op of the model has no deterministic form: "
                                                 "tf.nn.fractional_max_pool requires a non-zero seed"),
}


def test_bad_model_code_is_named_before_any_training_job(demo: Pipeline, hpc_user: HpcUser, registry: Registry,
                                                         udocker_dir: Path) -> None:
    experiments = {name: {**MINE, "model": {"code": "bad", "build": build, "params": params}}
                   for name, (build, params, _) in CASES.items()}
    experiments["noisy"] = {**MINE, "model": {"code": "bad", "build": "noisy:build"}}
    pipeline = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments=experiments)
    bad = pipeline.root / "bad"
    bad.mkdir()
    for name, text in BAD.items():
        (bad / name).write_text(text)
    for path in (bad, *bad.iterdir()):
        os.chown(path, hpc_user.uid, hpc_user.gid)
    # a file that does not parse is named with its line when the config is read, by a dry run, before any job
    syntax = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={
        "syntax": {**MINE, "model": {"code": "bad", "build": "syntax:build"}}})
    shutil.copytree(bad, syntax.root / "bad")
    _chown_tree(syntax.root / "bad", hpc_user.uid, hpc_user.gid)
    dry = syntax.snakemake("-n")
    assert dry.returncode != 0
    assert (f"experiments.syntax.model.build: {syntax.root / 'bad/syntax.py'}, line 2: '(' was never closed (the "
            "file does not parse") in dry.stdout + dry.stderr, (dry.stdout + dry.stderr)[-3000:]
    # the checks only (a model the check passes would train): each mistake named, and a random op of the model's own
    # that a resume cannot continue named in a warning (the seeded Dropout is not: its generator is checkpointed)
    proc = pipeline.snakemake("--keep-going", *[f"results/{name}/model-check.json" for name in experiments])
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    noisy = (pipeline.root / "logs/check_model/noisy.log").read_text()
    warning = [line for line in noisy.splitlines() if line.startswith("hvdflow: warning: noisy:build: ")]
    assert len(warning) == 1, noisy[-3000:]
    assert ("a resumed run cannot continue these random ops where they were" in warning[0]
            and "jitter/random_uniform/RandomUniform (RandomUniform)" in warning[0] and "dropout" not in warning[0])
    assert pipeline.json("results/noisy/model-check.json")["unresumable_random_ops"] == [
        "model/jitter/random_uniform/RandomUniform (RandomUniform)"]
    for name, (_, _, said) in CASES.items():
        log = (pipeline.root / f"logs/check_model/{name}.log").read_text()
        assert "your model code, checked before training: " in log and said in log, (name, log[-3000:])
        assert not (pipeline.root / f"results/{name}/checkpoints").exists(), name
    assert "rule train:" not in output, output[-6000:]
    assert pipeline.processes() == []


def test_the_reader_example_prepares_in_one_or_two_chunks_to_the_same_records_and_trains_to_the_same_weights(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    """Issue 28, a user's own data format: a folder of .npy arrays with a CSV of labels, read by examples/npy-reader
    in the image, prepared through the chunked, checksummed path in 1 and in 2 chunks, trained with 2 ranks on each."""
    reader = {"code": "examples/npy-reader", "read": "npy_labels:read"}
    common = {"source": reader, "path": "data/cells", "image": "hvdflow-cpu", "validation_fraction": 0.2,
              "test_fraction": 0.2, "seed": 5}
    run = {"image": "hvdflow-cpu", "ranks": 2, "model": "mlp", "hidden_units": 16, "epochs": 3, "batch_size": 6,
           "learning_rate": 0.05}
    pipeline = configured_pipeline(
        hpc_user, registry, udocker_dir, demo,
        datasets={"npy1": {**common, "chunks": 1}, "npy2": {**common, "chunks": 2}},
        experiments={"one": {**run, "dataset": "npy1"}, "two": {**run, "dataset": "npy2"}})
    write_npy_folder(pipeline.root / "data" / "cells")
    _chown_tree(pipeline.root / "data", hpc_user.uid, hpc_user.gid)
    proc = pipeline.snakemake("results/one/run.json", "results/two/run.json")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    indexes = {name: pipeline.json(f"resources/datasets/{name}/index.json") for name in ("npy1", "npy2")}
    for name, index in indexes.items():
        assert index["class_names"] == ["alpha", "beta", "gamma"] and index["feature_shape"] == [8, 8, 1]
        assert {split: index["splits"][split]["records"] for split in ("train", "validation", "test")} == {
            "train": 18, "validation": 6, "test": 6}, name
        assert index["spec"]["source"]["tree_sha256"] == tree_sha256(code_files(pipeline.root / "examples/npy-reader"))
    assert len(indexes["npy2"]["splits"]["train"]["shards"]) == 2   # one shard per chunk: two chunks really ran

    def split_records(name: str, split: str) -> list[bytes]:
        root = pipeline.root / "resources/datasets" / name
        return [r for shard in indexes[name]["splits"][split]["shards"] for r in records(root / shard["file"])]

    for split in ("train", "validation", "test"):
        assert split_records("npy1", split) == split_records("npy2", split), split
    one, two = pipeline.json("results/one/run.json"), pipeline.json("results/two/run.json")
    assert one["weights_sha256"] == two["weights_sha256"]
    # the reader's files are recorded, as a model's are, for hvdflow rerun to put back or refuse
    assert one["reader_code"]["folder"] == "examples/npy-reader" and set(one["reader_code"]["files"]) == {"npy_labels.py"}
    assert one["reader_code"]["tree_sha256"] == indexes["npy1"]["spec"]["source"]["tree_sha256"]
    assert one["user_code"] is None


LOOP = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": 2, "epochs": 5, "batch_size": 32, "learning_rate": 0.01,
        "model": {"code": "examples/training-script", "script": "train_digits.py", "params": {"hidden": 16}}}
"""The example training script (examples/training-script): its own Horovod loop with hvdflow's script API."""


def test_the_script_example_stops_together_on_ctrl_c_resumes_to_an_uninterrupted_runs_weights_and_is_checked(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    """Issue 28, a user's own training script: run once per rank in udocker, Ctrl-C stops both ranks after a
    checkpoint, the next call resumes to the weights of a run never stopped; a script that never calls run.finish()
    and one that does not parse are named, the second before any training job."""
    stopped = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={"loop": LOOP})
    running = stopped.start_snakemake()
    log = stopped.root / "logs/train/loop/rank-0.log"
    deadline = time.monotonic() + 900
    while "hvdflow: epoch 2/5" not in (log.read_text() if log.exists() else ""):
        assert running.poll() is None and time.monotonic() < deadline, Pipeline.finish(running).stderr[-5000:]
        time.sleep(0.05)
    os.killpg(running.pid, signal.SIGINT)
    first = Pipeline.finish(running, timeout=300)
    assert first.returncode != 0
    assert "stopped on a signal after a checkpoint (exit status 75)" in first.stdout + first.stderr, first.stderr[-5000:]
    for rank in (0, 1):
        assert "on signal SIGINT" in (stopped.root / f"logs/train/loop/rank-{rank}.log").read_text()
    assert not (stopped.root / "results/loop/model").exists() and stopped.processes() == []
    resumed = stopped.snakemake("results/loop/run.json")
    assert resumed.returncode == 0, resumed.stderr[-5000:]
    assert "resuming from checkpoint" in log.read_text()
    # the run never stopped measures nothing: the timers of the stopped one (a mark in the script's tf.function)
    # leave its weights as they were
    whole = configured_pipeline(hpc_user, registry, udocker_dir, demo,
                                experiments={"loop": {**LOOP, "usage_seconds": 0}})
    proc = whole.snakemake("results/loop/run.json")
    assert proc.returncode == 0, proc.stderr[-5000:]
    record, again = stopped.json("results/loop/run.json"), whole.json("results/loop/run.json")
    assert record["weights_sha256"] == again["weights_sha256"]
    # the resumed attempt timed the script's steps: the wait for batches, Horovod's allreduce from the tape
    assert [r["step_times"] for r in again["ranks"]] == [None, None]
    for rank in record["ranks"]:
        assert [e["epoch"] for e in rank["step_times"]][-2:] == [3, 4], rank["step_times"]
        assert all(e["input_seconds"] > 0 and e["compute_seconds"] > 0 and e["communication_seconds"] > 0
                   for e in rank["step_times"]), rank["step_times"]
    assert "verdict: unmeasured" not in stopped.hvdflow("report", "results/loop").stdout
    assert record["user_code"]["script"] == "train_digits.py" and record["user_code"]["build"] is None
    assert [row["epoch"] for row in record["history"]] == [0, 1, 2, 3, 4] and record["history"][-1]["val_accuracy"] > 0.8
    check = whole.json("results/loop/model-check.json")
    assert check["script"] == "train_digits.py" and check["summary"].startswith("compiles")
    # a script that never calls run.finish(), and one that does not parse (named when the config is read, by a dry
    # run, before any job)
    broken = configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={
        "unfinished": {**LOOP, "epochs": 1, "model": {**LOOP["model"], "script": "unfinished.py"}},
        "unaveraged": {**LOOP, "epochs": 1, "model": {**LOOP["model"], "script": "unaveraged.py"}},
        "unparsed": {**LOOP, "model": {**LOOP["model"], "script": "unparsed.py"}}})
    folder = broken.root / "examples/training-script"
    text = (folder / "train_digits.py").read_text()
    (folder / "unfinished.py").write_text(text.replace("run.finish()", "print('done')"))
    averaging = "    tape = hvd.DistributedGradientTape(tape)   # the gradients averaged over the ranks\n"
    assert averaging in text
    (folder / "unaveraged.py").write_text(text.replace(averaging, ""))
    (folder / "unparsed.py").write_text(text.replace("for epoch in run.epochs_to_run():", "for epoch in run.epochs_to_run()"))
    _chown_tree(folder, hpc_user.uid, hpc_user.gid)
    dry = broken.snakemake("-n")
    assert dry.returncode != 0
    assert re.search(r"experiments\.unparsed\.model\.script: \S+/unparsed\.py, line \d+: expected ':' \(the file "
                     r"does not parse", dry.stdout + dry.stderr), (dry.stdout + dry.stderr)[-3000:]
    (folder / "unparsed.py").write_text(text)  # mended: the config parses again; only the two below are run
    failed = broken.snakemake("--keep-going", "results/unfinished/run.json", "results/unaveraged/run.json")
    assert failed.returncode != 0
    unfinished = (broken.root / "logs/train/unfinished.log").read_text()
    assert "the training script unfinished.py ended without calling run.finish()" in unfinished, unfinished[-3000:]
    # a loop whose gradients are not averaged: the ranks' models differ, and finish() names what and why
    unaveraged = (broken.root / "logs/train/unaveraged.log").read_text()
    assert re.search(r"the ranks ended with different models: trainable dense\S*:0(, dense\S*:0)*: their gradients "
                     r"were not averaged over the ranks", unaveraged), unaveraged[-3000:]
    assert not (broken.root / "logs/train/unparsed.log").exists()
    for name in ("unfinished", "unaveraged", "unparsed"):
        assert not (broken.root / f"results/{name}/run.json").exists() and not (
            broken.root / f"results/{name}/model").exists()
    assert broken.processes() == []


def test_the_benchmark_measures_a_users_model_under_its_own_name(demo: Pipeline, hpc_user: HpcUser,
                                                                  registry: Registry, udocker_dir: Path) -> None:
    """Issue 28: a user's model is a model the benchmark target measures (the example CNN on synthetic digits)."""
    mine = {"code": "examples/keras-model", "build": "cnn:build", "params": {"filters": 4}, "input_shape": [8, 8, 1],
            "num_classes": 10}
    pipeline = benchmark_pipeline(hpc_user, registry, udocker_dir, demo, models=["mine"], ranks=[2], repetitions=1,
                                  allreduce=False, user_models={"mine": mine})
    proc = pipeline.snakemake("benchmark")
    assert proc.returncode == 0, proc.stderr[-5000:]
    table = read_table(pipeline)
    assert float(table[("mine", 2, 1, "udocker", "samples_per_second", 0)]["mean"]) > 0
    measured = pipeline.json("results/benchmark/measurements/mine-r2-n1-udocker-0.json")
    assert measured["ranks"] == 2 and measured["parameters"] > 0
    assert pipeline.processes() == []


def test_the_example_model_trains_with_the_neighbour_strategy_and_runs_elastically(
        demo: Pipeline, hpc_user: HpcUser, registry: Registry, udocker_dir: Path) -> None:
    """Issue 28: hvdflow's strategies serve a user's model as a built-in one: neighbour averaging (each rank steps on
    its own gradient, then averages with its neighbours; one model at the end), and an elastic run that loses a rank
    goes on with the other. (Equality with allreduce to 1e-5 holds for the digits MLP, tests/test_pipeline.py; this
    CNN at this rate amplifies the two orders of summation to about 5e-3, measured.)"""
    short = {**MINE, "epochs": 2}
    pipeline = with_user_code(configured_pipeline(hpc_user, registry, udocker_dir, demo, experiments={
        "neighbour": {**short, "strategy": "neighbour"}, "elastic": {**short, "elastic": {"min_ranks": 1}}}), hpc_user)
    profile = pipeline.root / "profiles/local/hvdflow.yaml"
    profile.write_text(profile.read_text() + "elastic_cooldown_seconds: 3600\n")
    proc = pipeline.snakemake("results/neighbour/evaluation.json")
    assert proc.returncode == 0, proc.stderr[-5000:]
    record = pipeline.json("results/neighbour/run.json")
    assert record["user_code"]["build"] == "cnn:build"
    rank = pipeline.json("results/neighbour/rank-1.json")
    assert (rank["strategy"], rank["topology"]) == ("neighbour", "ring")
    assert {r["weights_sha256"] for r in record["ranks"]} == {record["weights_sha256"]}  # averaged once at the end
    assert pipeline.json("results/neighbour/evaluation.json")["accuracy"] > 0.5
    # rank 1 killed 3 steps into epoch 2: rank 0 rolls back to epoch 1's end and finishes alone
    lost = pipeline.snakemake("results/elastic/run.json", extra_env={"HVDFLOW_INJECT_RANK_FAILURE": "1:2.3:kill:once"})
    assert lost.returncode == 0, lost.stderr[-5000:]
    memberships = pipeline.json("results/elastic/run.json")["elastic"]["memberships"]
    assert [m["ranks"] for m in memberships] == [2, 1], memberships
    assert pipeline.processes() == []
