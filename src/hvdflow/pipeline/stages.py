"""The pipeline's stages: list, prepare, gather, train and evaluate, each one function a rule's step calls.

Each stage runs the in-container code through a runtime (:mod:`hvdflow.runtime`), writes its outputs, and
writes the file that marks it complete last, so a failed stage never leaves outputs that look complete.
A training's ranks go to their launcher through the one dispatcher (:func:`hvdflow.pipeline.dispatch.launch`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.config.checks import check_launcher
from hvdflow.config.datasets import bind_paths
from hvdflow.config.experiment import TrainSpec
from hvdflow.config.profile import LAUNCHERS, ClusterProfile, SlurmCluster
from hvdflow.config.user_code import UserModel
from hvdflow.errors import DatasetError, LaunchError, RunStopped
from hvdflow.files.atomic import write_json_atomic
from hvdflow.files.heartbeat import progress_seconds
from hvdflow.launch import faults
from hvdflow.launch.cpus import CpuPlan, local_plan, slurm_plan
from hvdflow.launch.job import TrainingJob
from hvdflow.launch.request import ElasticLaunch, ElasticSettings, LaunchRequest
from hvdflow.launch.supervise import note, run_one
from hvdflow.pipeline.dispatch import launch
from hvdflow.pipeline.resume import (
    begin_attempt,
    describe_attempts,
    end_attempt,
    load_attempts,
    prepare_checkpoint_folder,
    stopped_after_signal_checkpoint,
    training_finished,
)
from hvdflow.runtime import Runtime
from hvdflow.slurm.jobinfo import cpus_per_task, current_job
from hvdflow_index import DATASET_FILE, PrepareError, gather
from hvdflow_wire import WireError
from hvdflow_wire.evaluation import Evaluation, read_evaluation
from hvdflow_wire.model_check import ModelCheck
from hvdflow_wire.rank import RankResult
from hvdflow_wire.user_code import user_code_error

MODEL = "model"
"""The trained model's folder in a run's output folder: ``model.keras`` (TensorFlow) or ``model.pt`` (PyTorch) in it."""
TRAIN_OUTPUTS = (MODEL, "metrics.json", "history.csv", "run.json", "tensorboard")
CHECKPOINTS = "checkpoints"
"""The run's checkpoint folder in its output folder: not an output (Snakemake would delete it before a retry)."""


def list_dataset(runtime: Runtime, spec: Mapping[str, Any], chunks: int, manifest_dir: Path, log: Path,
                 timeout: Optional[float] = None) -> None:
    """Scatter: list a resolved dataset spec's samples into a manifest of ``chunks`` chunks (in the runtime)."""
    manifest_dir.parent.mkdir(parents=True, exist_ok=True)
    command = ["python3", "-m", "hvdflow_trainer.prepare", "list", "--spec", json.dumps(dict(spec), sort_keys=True),
               "--chunks", str(chunks), "--out", str(manifest_dir), "--progress-seconds", str(progress_seconds())]
    run_one(runtime, command, [manifest_dir.parent, *bind_paths(spec)], log, timeout, f"listing dataset {spec['name']}")


def prepare_chunk(runtime: Runtime, manifest_dir: Path, chunk: int, chunk_dir: Path, log: Path,
                  timeout: Optional[float] = None) -> None:
    """Write one chunk of a manifest as shards into ``chunk_dir`` (in the runtime)."""
    spec = json.loads((manifest_dir / DATASET_FILE).read_text())["spec"]
    command = ["python3", "-m", "hvdflow_trainer.prepare", "chunk", "--manifest", str(manifest_dir),
               "--chunk", str(chunk), "--out", str(chunk_dir), "--progress-seconds", str(progress_seconds())]
    run_one(runtime, command, sorted({manifest_dir.parent, chunk_dir.parent, *bind_paths(spec)}), log, timeout,
            f"preparing chunk {chunk} of dataset {spec['name']}")


def gather_dataset(manifest_dir: Path, chunk_dirs: list[Path], out_dir: Path) -> dict[str, object]:
    """Gather: the chunks' reports into ``out_dir/index.json`` (written last); DatasetError naming what is wrong."""
    (out_dir / "index.json").unlink(missing_ok=True)
    try:
        return gather(str(manifest_dir), [str(d) for d in chunk_dirs], str(out_dir))
    except PrepareError as exc:
        raise DatasetError(f"dataset {out_dir}: {exc}") from None


def prepare_dataset(runtime: Runtime, spec: Mapping[str, Any], out_dir: Path, log: Path, chunks: int = 1) -> dict[str, object]:
    """All three steps one after the other (outside Snakemake): ``out_dir`` gets the manifest, chunks and index."""
    (out_dir / "index.json").unlink(missing_ok=True)
    list_dataset(runtime, spec, chunks, out_dir / "manifest", log)
    chunk_dirs = [out_dir / f"chunk-{i}" for i in range(chunks)]
    for i, chunk_dir in enumerate(chunk_dirs):
        prepare_chunk(runtime, out_dir / "manifest", i, chunk_dir, log)
    return gather_dataset(out_dir / "manifest", chunk_dirs, out_dir)


def train(runtime: Runtime, launcher: str, spec: TrainSpec, dataset_dir: Path, out_dir: Path, logs_dir: Path,
          identity: Mapping[str, object], iface: str = "lo", fail: Optional[str] = None,
          slow_steps: Optional[str] = None,
          slurm: Optional[SlurmCluster] = None, timeout: Optional[float] = None, progress: Optional[Path] = None,
          cpu_bind: str = "cores", elastic: Optional[ElasticSettings] = None) -> list[RankResult]:
    """Train ``spec`` on the prepared dataset with ``spec.ranks`` Horovod ranks; return the ranks' results.

    Rank logs and the rendezvous port file go to ``logs_dir``; outputs to ``out_dir``, checkpoints to
    ``out_dir/checkpoints`` (kept across attempts: :mod:`hvdflow.pipeline.resume`). With ``slurm`` the ranks run
    as tasks of the current Slurm job on ``spec.nodes`` nodes, reading a node-local copy of the dataset. ``timeout``
    (seconds) is the profile's own limit, if it sets one; what the run does and rank 0's progress lines go to
    ``progress`` (the rule's log). Each rank owns its cores and runs that many threads (:mod:`hvdflow.launch.cpus`):
    on this machine as ``cpu_bind`` says, under Slurm the job's ``--cpus-per-task``, bound as the cluster's
    ``cpu_bind`` says.

    Raises RunStopped if the ranks stopped on a signal (a checkpoint was saved), LaunchError if a rank fails, ends
    before the last epoch, or the ranks end with different weights.
    ``fail`` (``RANK:EPOCH[.STEP][:exit|exit0|kill|signal][:once]``) makes that rank crash after that epoch or step
    (for tests); ``slow_steps`` seconds of sleep after each step make the run outlast a time limit (for tests). With
    ``elastic`` (from :func:`elastic_settings`) the ranks run under Horovod's elastic driver
    (:mod:`hvdflow.launch.elastic`), and the results are those of the ranks of the last membership.
    """
    if launcher not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = out_dir / CHECKPOINTS
    plan = prepare_checkpoint_folder(checkpoints, identity, spec.resume)
    for line in describe_attempts(load_attempts(checkpoints)):
        note(progress, f"hvdflow: {line}")
    note(progress, f"hvdflow: {plan.text}")
    for name in TRAIN_OUTPUTS:
        target = out_dir / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    for stale in out_dir.glob("rank-*.json"):
        stale.unlink()
    logs_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(logs_dir / "identity.json", dict(identity))
    run_args = ["--checkpoint-dir", str(checkpoints), "--identity", str(logs_dir / "identity.json")]
    cpus = cpu_plan(spec.slots, slurm, cpu_bind)
    note(progress, f"hvdflow: CPUs: {cpus.why}")
    user = spec.user_model()
    job = TrainingJob(spec.trainer_args() + run_args + ["--threads", str(cpus.threads)] + faults.trainer_args(fail, slow_steps),
                      spec.slots, spec.nodes, dataset_dir, out_dir, logs_dir, read_paths=[user.code] if user else [])
    begin_attempt(checkpoints, plan)
    started = time.time()
    try:
        launch(runtime, LaunchRequest(job, launcher, cpus, None if elastic is None else ElasticLaunch(elastic, spec.ranks),
                                      slurm, iface, timeout, progress))
        results = collect_rank_results(out_dir, spec.ranks if elastic is None else final_size(out_dir), spec.epochs)
    except BaseException as exc:
        return end_failed_attempt(exc, checkpoints, out_dir, spec.ranks if elastic is None else None, spec.epochs,
                                  started, progress)
    end_attempt(checkpoints, "completed")
    return results


def end_failed_attempt(failure: BaseException, checkpoints: Path, out_dir: Path, ranks: Optional[int], epochs: int,
                       started: float, progress: Optional[Path]) -> list[RankResult]:
    """Record how an attempt whose launch raised ``failure`` ended, and raise it (a RunStopped where the ranks
    stopped on a signal after a checkpoint), its partial outputs removed; or, where every rank had finished and
    written its result (:func:`completed_despite`), record it completed with a warning and return the results."""
    finished = completed_despite(failure, checkpoints, out_dir, ranks, epochs)
    if finished is not None:
        said = f"every rank finished and wrote its result, then the launch failed: {str(failure).splitlines()[0]}"
        note(progress, f"hvdflow: warning: {said}; the run is complete (its results checked)")
        end_attempt(checkpoints, "completed", said)
        return finished
    shutil.rmtree(out_dir / MODEL, ignore_errors=True)
    (out_dir / "metrics.json").unlink(missing_ok=True)
    stopped = stopped_after_signal_checkpoint(checkpoints, started, failure)
    end_attempt(checkpoints, "stopped on a signal after a checkpoint" if stopped else "failed",
                str(failure) or type(failure).__name__)
    if stopped is not None and stopped is not failure:
        raise stopped from failure
    raise failure


def cpu_plan(ranks: int, slurm: Optional[SlurmCluster], cpu_bind: str) -> CpuPlan:
    """Each rank's cores and thread count: on this machine as ``cpu_bind`` says, under Slurm the job's
    ``--cpus-per-task`` bound as the cluster's ``cpu_bind`` says (:mod:`hvdflow.launch.cpus`)."""
    if slurm is None:
        return local_plan(ranks, cpu_bind)
    return slurm_plan(ranks, cpus_per_task(current_job(), os.environ), slurm.cpu_bind)


def elastic_settings(spec: TrainSpec, profile: ClusterProfile) -> Optional[ElasticSettings]:
    """The elastic run's settings (the experiment's bounds, the profile's cooldown and timeout); None for a fixed
    run. LaunchError where the profile cannot run it: the MPI launcher (:func:`hvdflow.config.checks.check_launcher`)."""
    check_launcher(spec, profile)
    if spec.elastic is None:
        return None
    return ElasticSettings(spec.min_ranks, spec.max_ranks, profile.elastic_cooldown, profile.elastic_timeout)


def final_size(out_dir: Path) -> int:
    """How many ranks an elastic run ended with (rank 0's result says; 1 where there is none, so that the check of
    the results names rank 0's missing file)."""
    rank0 = out_dir / "rank-0.json"
    return read_rank_result(rank0).size if rank0.exists() else 1


def completed_despite(failure: BaseException, checkpoints: Path, out_dir: Path, ranks: Optional[int],
                      epochs: int) -> Optional[list[RankResult]]:
    """Every rank's result if the training finished although its launch then failed; None otherwise.

    Rank 0 writes the model, history and metrics, then marks the manifest finished, and every rank then writes its
    result: a launch that fails after that (a rank's wrapper killed at its exit, the time limit's SIGKILL while the
    ranks leave) has lost nothing, and a retry would train the whole run again. Only a launch error counts (never a
    stop or Ctrl-C), and only when the manifest is finished and the results of all ``ranks`` (an elastic run's: as
    many as rank 0 says, for None) pass :func:`collect_rank_results`.
    """
    if not isinstance(failure, LaunchError) or isinstance(failure, RunStopped) or not training_finished(checkpoints):
        return None
    try:
        return collect_rank_results(out_dir, final_size(out_dir) if ranks is None else ranks, epochs)
    except LaunchError:
        return None


def read_rank_result(path: Path) -> RankResult:
    """A rank's ``rank-<r>.json``; LaunchError naming the file and what is wrong if it is malformed."""
    try:
        return RankResult.read(str(path))
    except WireError as exc:
        raise LaunchError(f"a malformed rank result: {exc}") from None


def collect_rank_results(out_dir: Path, ranks: int, epochs: int) -> list[RankResult]:
    """Every rank's ``rank-<r>.json``; LaunchError if one is missing or malformed, ended before the last epoch, or
    the final weights differ."""
    results = []
    for rank in range(ranks):
        path = out_dir / f"rank-{rank}.json"
        if not path.exists():
            raise LaunchError(f"rank {rank} exited 0 but wrote no result {path}")
        result = read_rank_result(path)
        if result.epochs_done != epochs:
            raise LaunchError(f"rank {rank} exited 0 after {result.epochs_done} of {epochs} epochs ({path})")
        results.append(result)
    hashes = [r.weights_sha256 for r in results]
    if len(set(hashes)) != 1:
        raise LaunchError(f"ranks ended with different weights: {[h[:12] for h in hashes]}")
    return results


def check_user_model(runtime: Runtime, user: UserModel, dataset_dir: Path, out_file: Path, log: Path,
                     timeout: Optional[float] = None, deterministic: bool = True, framework: str = "tensorflow"
                     ) -> ModelCheck:
    """Build the user's model once in the image on the dataset's shape (:mod:`hvdflow_trainer.check_model`); what it
    built, written to ``out_file`` (and read back, checked). LaunchError with the error in the user's terms (file and
    line, function, arguments, output shape) where the code cannot train."""
    out_file.unlink(missing_ok=True)
    command = ["python3", "-m", "hvdflow_trainer.check_model", "--dataset", str(dataset_dir), "--out", str(out_file),
               *user.trainer_args(), "--framework", framework] + ([] if deterministic else ["--no-op-determinism"])
    try:
        run_one(runtime, command, [user.code, dataset_dir, out_file.parent], log, timeout,
                f"checking the model {user.entry} of {user.code}")
    except LaunchError:
        said = user_code_error(log.read_text(errors="replace")) if log.exists() else None
        if said is None:
            raise
        raise LaunchError(f"your model code, checked before training: {said}") from None
    return ModelCheck.read(str(out_file))


def evaluate(runtime: Runtime, model: Path, dataset_dir: Path, out_file: Path, log: Path,
             timeout: Optional[float] = None, user: Optional[UserModel] = None) -> Evaluation:
    """Test-set metrics of ``model`` written to ``out_file`` (and read back, checked); ``user``: the user's model,
    whose code is bound in and imported before the model is loaded."""
    out_file.unlink(missing_ok=True)
    command = ["python3", "-m", "hvdflow_trainer.evaluate", "--model", str(model), "--dataset", str(dataset_dir),
               "--out", str(out_file)] + (user.trainer_args() if user else [])
    binds = [model.parent, dataset_dir, out_file.parent] + ([user.code] if user else [])
    run_one(runtime, command, binds, log, timeout, f"evaluating {model}")
    return read_evaluation(str(out_file))
