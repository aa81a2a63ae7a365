"""Horovod ranks across the nodes of one Slurm job, started from the job's batch script (the train rule's body).

The Snakemake Slurm plugin submits the train rule as an MPI-style job (resources ``nodes``, ``tasks_per_node`` or
``tasks``, ``mpi``, ``gres``: :mod:`hvdflow.slurm.layout`) and runs its body in the batch script on the first node.
From there, in order:

1. a staging step with the training layout: the first task of each node removes what the user's ended jobs left on
   the node's scratch (those ``squeue --me`` no longer lists), copies the prepared shards there and verifies them;
   the node's other tasks wait (:mod:`hvdflow.slurm.staging`);
2. Gloo: the rendezvous server starts here and its address goes to ``rendezvous.json`` in the run's log directory;
   the training step ``srun ... python -m hvdflow.slurm.rank_task`` starts one rank per task (:mod:`hvdflow.slurm.rank_task`).
   MPI: the host's ``mpirun`` starts the ranks through Slurm (its ``plm/slurm`` runs ``orted`` with srun); the
   allocation variables the plugin's job step removes are restored from what the staging step saw;
   Elastic: the ranks are the workers of Horovod's elastic driver, each a one-task step (:mod:`hvdflow.slurm.elastic`);
3. a clean-up step removes the staged copy on every node, also after a failure.

One entry point per launcher (:func:`launch_slurm_gloo`, :func:`launch_slurm_mpi`, :func:`launch_slurm_elastic`),
picked by :func:`hvdflow.pipeline.dispatch.launch`; every command line they run is built in :mod:`hvdflow.slurm.srun`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, TypeVar

from hvdflow.code_location import with_this_hvdflow
from hvdflow.config.profile import SlurmCluster
from hvdflow.errors import LaunchError, RunStopped
from hvdflow.launch.elastic import ElasticJob, launch_elastic
from hvdflow.launch.job import TrainingJob
from hvdflow.launch.netaddr import rank_interface, rendezvous_address
from hvdflow.launch.rendezvous import start_rendezvous_server
from hvdflow.launch.request import LaunchRequest
from hvdflow.launch.supervise import HOROVOD_SHUTDOWN, ProgressFollower, log_tail, start, stop, supervise, supervise_mpirun
from hvdflow.runtime import Runtime
from hvdflow.slurm.elastic import SlurmWorkers
from hvdflow.slurm.jobinfo import current_job, job_nodes
from hvdflow.slurm.layout import gpus_per_node_needed, max_tasks_per_node
from hvdflow.slurm.rank_task import RANK_TASK_HEADER
from hvdflow.slurm.srun import cleanup_step, mpirun_ranks, rank_program, ranks_step, staging_step
from hvdflow.slurm.staging import NO_DATASET, NO_SWEEP, job_scratch, ranks_tmp, read_reports
from hvdflow_runstate import STOPPED_LINE_END
from hvdflow_wire import WireError
from hvdflow_wire.slurm import RankFailed, RankStopped, Rendezvous
from hvdflow_wire.task import TaskFile

CLEANUP_TIMEOUT = 300.0


def _live_jobs(job_id: str) -> str:
    """The user's jobs Slurm lists (running, requeued, pending), comma-separated, this one included; ``-`` if unknown."""
    try:
        proc = subprocess.run(["squeue", "--me", "--noheader", "--format=%A"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"hvdflow: warning: squeue failed ({exc}); node scratch left by ended jobs stays", file=sys.stderr)
        return NO_SWEEP
    if proc.returncode != 0:
        print(f"hvdflow: warning: squeue failed ({proc.stderr.strip()}); node scratch left by ended jobs stays",
              file=sys.stderr)
        return NO_SWEEP
    return ",".join(sorted({job_id, *proc.stdout.split()}))


_SRUN_FAILED = re.compile(r"srun: error: (\S+): tasks? ([\d\-,]+): (Exited with exit code \d+|Killed|Terminated)")


def srun_failed_task(srun_log: Path) -> Optional[tuple[int, str, str]]:
    """The first task srun reports as failed: (task, node, how), from srun's own output."""
    try:
        match = _SRUN_FAILED.search(srun_log.read_text(errors="replace"))
    except OSError:
        return None
    if not match:
        return None
    return int(re.split(r"[-,]", match.group(2))[0]), match.group(1), match.group(3)


def this_attempt(rank_log: Path) -> str:
    """The part of a rank log (appended to by every attempt) after the rank task's last header line."""
    return rank_log.read_text(errors="replace").rsplit(RANK_TASK_HEADER, 1)[-1] if rank_log.exists() else ""


Marker = TypeVar("Marker")


def rank_markers(logs: Path, pattern: str, read: Callable[[str], Marker]) -> list[Marker]:
    """The markers (``pattern``, read by ``read``) the rank tasks left in ``logs``, by file name; LaunchError naming
    a malformed one."""
    try:
        return [read(str(p)) for p in sorted(logs.glob(pattern))]
    except WireError as exc:
        raise LaunchError(f"a malformed rank marker: {exc}") from None


def first_failed_rank(logs: Path) -> Optional[RankFailed]:
    """The rank that failed first and on its own, from the ``rank-<r>.failed.json`` the rank tasks leave.

    When one rank dies, its peers fail too, with Horovod's shutdown message in their logs; the cause is the earliest
    failure without that message (else the earliest of all).
    """
    failures = rank_markers(logs, RankFailed.glob(), RankFailed.read)
    collateral = {f.rank: HOROVOD_SHUTDOWN in this_attempt(logs / f"rank-{f.rank}.log") for f in failures}
    failures.sort(key=lambda f: (collateral[f.rank], f.unix))
    return failures[0] if failures else None


def stopped_after_checkpoint(rank0_log: Path) -> bool:
    """Whether rank 0 says, in this attempt's part of its log, that the ranks stopped after its checkpoint.

    The trainer prints that line only once every rank has met rank 0 after the save, so the run is resumable even if
    srun then SIGKILLs ranks still exiting (it does so ``KillWait`` + 2 s after a SIGTERM to the step): such a rank
    task leaves neither a stopped nor a failed record.
    """
    return STOPPED_LINE_END in this_attempt(rank0_log)


def _raise_for_rank(label: str, logs: Path, exc: LaunchError) -> None:
    """Re-raise a failed step as the first failed rank's error, with its log, if a rank task recorded one."""
    failed = first_failed_rank(logs)
    if failed is not None:
        rank_log = logs / f"rank-{failed.rank}.log"
        raise LaunchError(f"{label}: rank {failed.rank} on {failed.host} failed first ("
                          f"{failed.reason}); the job step was stopped. Log: {rank_log}\n{log_tail(rank_log, 8)}"
                          f"\n{exc}") from None


def _run_step(label: str, argv: Sequence[str], log: Path, env: dict[str, str], timeout: Optional[float], logs: Path,
              progress: Optional[Path] = None, follow: Optional[Path] = None) -> None:
    """Run one job step to completion, its progress lines (those of ``follow``, rank 0's log by default) copied to
    ``progress``; LaunchError naming the failed rank and its log (RunStopped as it is)."""
    # from the log's end before the step appends to it
    follower = ProgressFollower(follow or logs / "rank-0.log", progress)
    step = start(label, argv, log, env)
    try:
        supervise([step], timeout, follow=follower)
    except RunStopped:
        raise
    except LaunchError as exc:
        stopped = rank_markers(logs, RankStopped.glob(), RankStopped.read)
        if (stopped or stopped_after_checkpoint(logs / "rank-0.log")) and first_failed_rank(logs) is None:
            raise RunStopped(f"{label}: the ranks stopped on a signal after a checkpoint; starting the "
                             f"job again resumes the run. Log: {logs / 'rank-0.log'}") from None
        _raise_for_rank(label, logs, exc)
        failed = srun_failed_task(log)
        if failed is None:
            raise
        task, node, how = failed
        rank_log = logs / f"rank-{task}.log"
        detail = log_tail(rank_log, 8) if rank_log.exists() else log_tail(log, 8)
        where = rank_log if rank_log.exists() else log
        raise LaunchError(f"{label}: rank {task} on {node} failed ({how}); the job step was stopped. Log: {where}\n"
                          f"{detail}\n{exc}") from None


def _allocation_env(reports: Path, job: str, ranks: int, nodes: int) -> dict[str, str]:
    """The allocation variables Open MPI's Slurm support reads, as the staging step's first task saw them."""
    seen = read_reports(reports)[0]
    nodelist, tasks_per_node = seen.step_nodelist, seen.step_tasks_per_node
    if nodelist is None or tasks_per_node is None:
        raise LaunchError(f"the staging step's task {seen.procid} in {reports} saw no SLURM_STEP_NODELIST or "
                          f"SLURM_STEP_TASKS_PER_NODE")
    return {
        "SLURM_JOB_ID": job, "SLURM_JOBID": job,
        "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_NTASKS": str(ranks), "SLURM_NPROCS": str(ranks),
    }


@dataclass(frozen=True)
class StagedJob:
    """A Slurm job whose staging step ran: its id, the dataset's node-local copy, the staging reports, and the
    environment of its job steps."""

    job_id: str
    staged: Path
    reports: Path
    env: dict[str, str]


@contextmanager
def staged_job(runtime: Runtime, cluster: SlurmCluster, job: TrainingJob, cpus_per_task: int, timeout: Optional[float],
               elastic: bool = False, progress: Optional[Path] = None) -> Iterator[StagedJob]:
    """Stage the dataset on every node (a job step in the training's layout), then clean the nodes' scratch up when
    the ranks are done, whatever happened. Each node's bytes copied so far go to ``progress`` (the rule's log).

    The staging step also runs for a job without a dataset: it sweeps ended jobs' scratch and reports the allocation
    (the MPI mode needs it); it copies nothing then. An ``elastic`` job may have lost nodes (--no-kill): the clean-up
    runs on those it holds then.
    """
    job_id = current_job()
    logs, ranks, nodes = job.logs_dir, job.ranks, job.nodes
    logs.mkdir(parents=True, exist_ok=True)
    for stale in [*logs.glob(RankFailed.glob()), *logs.glob(RankStopped.glob())]:
        stale.unlink()
    staged = job_scratch(cluster.job_scratch_dir(), job_id) / "dataset"
    reports = logs / "staging"
    reports.mkdir(exist_ok=True)
    env = with_this_hvdflow(runtime.process_env())  # the job steps import the very code the rule imported
    try:
        _run_step("staging", staging_step(cluster, ranks, nodes, cpus_per_task, sys.executable,
                                          str(job.dataset_dir or NO_DATASET), staged, reports, _live_jobs(job_id)),
                  logs / "staging.log", env, timeout, logs, progress, follow=logs / "staging.log")
        yield StagedJob(job_id, staged, reports, env)
    finally:
        clean_scratch(staged.parent, len(job_nodes(job_id)) if elastic else nodes, logs / "cleanup.log", env)


def _rank_tasks(runtime: Runtime, launcher: str, cluster: SlurmCluster, job: TrainingJob, staged: Path) -> list[str]:
    """Write the launch every rank task reads (``task.json``); the rank task's program."""
    logs, ranks, nodes = job.logs_dir, job.ranks, job.nodes
    gpus = gpus_per_node_needed(ranks, nodes, cluster)
    inner = runtime.command(job.argv(staged if job.dataset_dir else None), {},
                            [logs, job.out_dir, staged.parent, *job.read_paths], hostenv=True)
    task = TaskFile(argv=inner, logs=str(logs), result=str(job.out_dir / "rank-{rank}.json"), launcher=launcher,
                    network_interface=cluster.network_interface, rendezvous=str(logs / "rendezvous.json"),
                    max_ranks_per_node=max_tasks_per_node(ranks, nodes), nvidia=runtime.gpu_setup() if gpus else None,
                    tmpdir=str(ranks_tmp(staged.parent)))
    task.write(str(logs / "task.json"))
    return rank_program(sys.executable, logs / "task.json")


def _in_slurm(request: LaunchRequest) -> tuple[SlurmCluster, TrainingJob, int, Optional[float], Optional[Path]]:
    """``(cluster, job, CPUs per task, timeout, progress)`` of a request to run across the current Slurm job."""
    if request.slurm is None:
        raise LaunchError("a launch across a Slurm job's nodes needs the profile's slurm section")
    return request.slurm, request.job, request.cpus.threads, request.timeout, request.progress


def launch_slurm_gloo(runtime: Runtime, request: LaunchRequest) -> None:
    """Stage the dataset on every node, run the ranks as one srun step over Gloo, clean up.

    Each rank's task gets the CPU plan's threads as CPUs. Rank 0's progress lines go to the request's ``progress``
    (the rule's log) as they come.
    """
    cluster, job, cpus_per_task, timeout, progress = _in_slurm(request)
    with staged_job(runtime, cluster, job, cpus_per_task, timeout, progress=progress) as staged:
        program = _rank_tasks(runtime, "gloo", cluster, job, staged.staged)
        _train_gloo(runtime, cluster, ranks_step(cluster, job.ranks, job.nodes, program, cpus_per_task), job.logs_dir,
                    staged.env, timeout, progress)


def launch_slurm_mpi(runtime: Runtime, request: LaunchRequest) -> None:
    """Stage the dataset on every node, run the ranks from the host's mpirun through Slurm, clean up (as
    :func:`launch_slurm_gloo`)."""
    cluster, job, cpus_per_task, timeout, progress = _in_slurm(request)
    with staged_job(runtime, cluster, job, cpus_per_task, timeout, progress=progress) as staged:
        program = _rank_tasks(runtime, "mpi", cluster, job, staged.staged)
        mpi_env = {**staged.env, **_allocation_env(staged.reports, staged.job_id, job.ranks, job.nodes)}
        gpus = gpus_per_node_needed(job.ranks, job.nodes, cluster)
        if gpus:
            mpi_env["SLURM_GPUS_PER_NODE"] = str(gpus)
        _train_mpi(job.ranks, program, job.logs_dir, mpi_env, timeout, progress)


def launch_slurm_elastic(runtime: Runtime, request: LaunchRequest) -> None:
    """Stage the dataset on every node, run an elastic run whose ranks are the workers of Horovod's elastic driver,
    each a job step of its own on the job's healthy nodes (:mod:`hvdflow.slurm.elastic`), clean up."""
    cluster, job, cpus_per_task, timeout, progress = _in_slurm(request)
    with staged_job(runtime, cluster, job, cpus_per_task, timeout, elastic=True, progress=progress) as staged:
        address = rendezvous_address(cluster.network_interface)
        binds = [job.logs_dir, job.out_dir, staged.staged.parent, *job.read_paths]
        workers = SlurmWorkers(cluster, staged.job_id, max_tasks_per_node(job.ranks, job.nodes), cpus_per_task,
                               runtime, binds, staged.env, job.logs_dir, ranks_tmp(staged.staged.parent))
        launch_elastic(runtime, workers, ElasticJob.of(request, job.argv(staged.staged), binds, address,
                                                       rank_interface(cluster.network_interface, address)))


def clean_scratch(job_dir: Path, nodes: int, log: Path, env: dict[str, str], tries: int = 2) -> None:
    """Remove ``job_dir`` from every node's scratch with one task per node.

    A failed clean-up is tried again (the time limit's warning, sent once to every job step, may have caught the
    first one starting up, before it ignores the signal); if the last try fails too, a warning names the log, and the
    next job of the user on that node sweeps the directory.
    """
    clean = cleanup_step(nodes, job_dir, sys.executable)
    for attempt in range(1, tries + 1):
        try:
            supervise([start("scratch clean-up", clean, log, env)], CLEANUP_TIMEOUT)
            return
        except LaunchError as exc:
            again = "; trying again" if attempt < tries else f"; {job_dir} stays on the nodes. Log: {log}"
            print(f"hvdflow: warning: {exc}{again}", file=sys.stderr)


def _train_gloo(runtime: Runtime, cluster: SlurmCluster, ranks_step: list[str], logs: Path, env: dict[str, str],
                timeout: Optional[float], progress: Optional[Path]) -> None:
    address = rendezvous_address(cluster.network_interface)
    server, port = start_rendezvous_server(runtime, logs, [logs], env, address)
    try:
        Rendezvous(address, port, os.uname().nodename).write(str(logs / "rendezvous.json"))
        _run_step("training", ranks_step, logs / "srun.log", env, timeout, logs, progress)
    finally:
        stop([server])


def _train_mpi(ranks: int, rank_program: list[str], logs: Path, env: dict[str, str], timeout: Optional[float],
               progress: Optional[Path]) -> None:
    argv = mpirun_ranks(ranks, rank_program)
    try:
        supervise_mpirun(start("mpirun", argv, logs / "mpirun.log", env), logs, timeout, progress)
    except RunStopped:
        raise
    except LaunchError as exc:
        _raise_for_rank("training", logs, exc)
        raise

