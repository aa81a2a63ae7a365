"""One Horovod rank inside a Slurm job: started by srun (Gloo) or by Open MPI's mpirun (MPI), on the node it runs on.

``python -m hvdflow.slurm.rank_task TASK.json`` reads the launch written by :mod:`hvdflow.slurm.launch`, finds this task's
rank and local rank, keeps the one GPU of its local rank visible, does what the runtime asked for to expose it
(:func:`hvdflow.runtime.expose_gpus`: udocker's NVIDIA set-up once per container and node where a driver
exists), adds Horovod's Gloo variables (rendezvous address from the run directory), and runs the runtime's command in
its own process group, forwarding TERM, USR1 and INT to it, its output in ``rank-<r>.log``. A rank that exits non-zero
leaves ``rank-<r>.failed.json`` (host, exit code, time), so the launcher can tell the rank that failed first from those
that failed because it did; one that stopped on a signal after a checkpoint (exit status 75) leaves
``rank-<r>.stopped.json`` instead. An elastic worker's task (``"elastic": true``) takes its placement from Horovod's
driver, writes the log its launcher names, and only exits with the rank's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO, Mapping

from hvdflow.errors import HvdflowError, LaunchError
from hvdflow.files.private import RANKS_TMPDIR, check_private
from hvdflow.launch.cpus import cpu_list
from hvdflow.launch.netaddr import rank_interface
from hvdflow.launch.rank_env import horovod_gloo_env
from hvdflow.launch.supervise import STOP_SIGNALS, exit_text, ignore_stop_signals
from hvdflow.runtime import expose_gpus
from hvdflow.slurm.env import global_rank_of, gpu_for_rank, local_rank_of, local_size_of, slurm_placement
from hvdflow_runstate import STOPPED_EXIT
from hvdflow_wire import WireError
from hvdflow_wire.slurm import RankFailed, RankStopped, Rendezvous
from hvdflow_wire.task import TaskFile

RANK_TASK_HEADER = "# hvdflow rank task, job "
"""How each attempt's part of a rank log begins (the log is appended to by every attempt of a job); no other line of
the rank task starts so (a signal forwarded after rank 0's stop line must not hide it)."""


def rank_environment(task: TaskFile, env: Mapping[str, str]) -> tuple[int, dict[str, str], list[str]]:
    """This task's rank, the environment its command runs with, and notes for its log.

    An elastic worker's placement comes from Horovod's driver (``HOROVOD_*`` in ``env``, :mod:`hvdflow.launch.elastic`),
    not from Slurm's task variables: each worker is a one-task step."""
    host = os.uname().nodename
    gloo = task.launcher == "gloo" and not task.elastic
    placement = slurm_placement(env) if gloo else None
    if task.elastic:
        rank, local_rank = int(env["HOROVOD_RANK"]), int(env["HOROVOD_LOCAL_RANK"])
    else:
        rank = placement.rank if placement else global_rank_of(env)
        local_rank = placement.local_rank if placement else local_rank_of(env)
    child = dict(env)
    notes = [f"rank {rank} (local rank {local_rank}) on {host}, CPUs {cpu_list(os.sched_getaffinity(0))} "
             f"(SLURM_CPUS_PER_TASK={env.get('SLURM_CPUS_PER_TASK', 'unset')}, "
             f"SLURM_CPU_BIND={env.get('SLURM_CPU_BIND', 'unset')})"]
    local_size = (int(env["HOROVOD_LOCAL_SIZE"]) if task.elastic else
                  placement.local_size if placement else local_size_of(env))
    if local_size > task.max_ranks_per_node:
        raise LaunchError(f"rank {rank}: Slurm placed {local_size} ranks on {host}, the job's plan allows at most "
                          f"{task.max_ranks_per_node} per node (ceil(ranks / nodes)); check the job's --ntasks-per-node")
    gpu = gpu_for_rank(env.get("CUDA_VISIBLE_DEVICES"), local_rank, local_size, host)
    if gpu is not None:
        child["CUDA_VISIBLE_DEVICES"] = gpu
        notes.append(f"GPU {gpu} of {env.get('CUDA_VISIBLE_DEVICES')}")
        if task.nvidia:
            notes.append(expose_gpus(task.nvidia))
    if placement is not None:
        try:
            rendezvous = Rendezvous.read(str(task.rendezvous))
        except WireError as exc:
            raise LaunchError(f"a malformed rendezvous file: {exc}") from None
        iface = rank_interface(task.network_interface, rendezvous.addr)
        child.update(horovod_gloo_env(placement, rendezvous.addr, rendezvous.port, iface))
        notes.append(f"Gloo rendezvous {rendezvous.addr}:{rendezvous.port} over {iface}")
    if task.tmpdir is not None:
        child["TMPDIR"] = str(check_private_tmp(Path(task.tmpdir)))
        notes.append(f"TMPDIR {task.tmpdir}")
    if task.elastic:
        iface = rank_interface(task.network_interface, env["HOROVOD_GLOO_RENDEZVOUS_ADDR"])
        child["HOROVOD_GLOO_IFACE"] = iface
        notes.append(f"elastic worker {env.get('HVDFLOW_ELASTIC_WORKER')}, Horovod's driver at "
                     f"{env['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:{env['HOROVOD_GLOO_RENDEZVOUS_PORT']} over {iface}")
    return rank, child, notes


def check_private_tmp(tmpdir: Path) -> Path:
    """``tmpdir`` if it is the user's private folder, as the staging step made it on this node; UnsafePlace naming
    what is there instead, LaunchError where nothing is."""
    if check_private(tmpdir, RANKS_TMPDIR):
        return tmpdir
    raise LaunchError(f"the ranks' TMPDIR {tmpdir} is not on {os.uname().nodename}: the job's staging step makes it")


DROP_SIGNAL = signal.SIGHUP
"""What an elastic worker's launcher sends (srun forwards it) when Horovod's driver gives the worker up: the rank is
killed at once. Not SIGTERM, which the trainer takes as a request to checkpoint and stop the whole run."""


def run_forwarding_signals(argv: list[str], log: BinaryIO, env: Mapping[str, str], drop: bool = False) -> int:
    """Run ``argv`` in its own process group, forwarding TERM, USR1 and INT to that whole group; its exit status.

    Under ``proctrack/cgroup`` Slurm signals only a task's top process (this one); the trainer inside the container
    must get the signal to checkpoint, and USR1's default action would kill this process instead. The processes
    between this one and the trainer ignore those signals (:func:`~hvdflow.launch.supervise.ignore_stop_signals`).
    With ``drop`` (an elastic worker), :data:`DROP_SIGNAL` kills the rank's group instead.

    Once the rank has ended, this process ignores those signals until it exits: the scheduler's warning reaches every
    task of the step at once, and a task whose rank had already finished (its node's ranks done first) was killed
    by USR1's default action while it reported, failing a completed run (CI, 2026-11-29: job 851, tasks 2-3).
    """
    group: list[int] = []  # the rank's process group, once it is started
    early: list[int] = []  # signals that came before it was

    def send(signum: int) -> None:
        try:
            os.killpg(group[0], signum)
        except ProcessLookupError:
            pass

    def forward(signum: int, frame: object) -> None:
        log.write(f"# hvdflow rank task: forwarding {signal.Signals(signum).name} to the rank\n".encode())
        log.flush()
        if group:
            send(signum)
        else:
            early.append(signum)

    def kill(signum: int, frame: object) -> None:
        log.write(b"# hvdflow rank task: the elastic driver gave this worker up; killing the rank\n")
        log.flush()
        if group:
            send(signal.SIGKILL)
        else:
            early.append(signal.SIGKILL)

    # the handlers go in before the rank starts: a signal in between (the scheduler's warning on a loaded node) would
    # otherwise take USR1's default action and kill this process (seen in the suite)
    handled = [*STOP_SIGNALS, *([DROP_SIGNAL] if drop else [])]
    for sig in handled:
        signal.signal(sig, kill if sig == DROP_SIGNAL else forward)
    try:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
                                start_new_session=True, preexec_fn=ignore_stop_signals)
        group.append(proc.pid)
        for signum in early:
            send(signum)
        return proc.wait()
    finally:
        for sig in handled:
            signal.signal(sig, signal.SIG_IGN)


def main(argv: list[str]) -> int:
    """Run this task's rank and exit with its status; exit 1 with a message if the task cannot be placed."""
    task = TaskFile.read(argv[0])
    try:
        rank, env, notes = rank_environment(task, os.environ)
    except HvdflowError as exc:
        print(f"hvdflow rank task on {os.uname().nodename}: error: {exc}", file=sys.stderr)
        return 1
    logs = Path(task.logs)
    log_path = Path(task.log) if task.elastic else logs / f"rank-{rank}.log"
    with open(log_path, "ab") as log:  # appended: a requeued or retried job keeps every attempt's
        # a job step does not always carry SLURM_RESTART_COUNT (the test bed's rank tasks, reading it with a default
        # of 0, wrote "restart 0" on a job's restarts 1 and 2): unknown, it is left out; the start time tells runs apart
        restart = os.environ.get("SLURM_RESTART_COUNT")
        log.write((f"{RANK_TASK_HEADER}{os.environ.get('SLURM_JOB_ID')}{f' (restart {restart})' if restart else ''}, "
                   f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\n" + "".join(f"# {note}\n" for note in notes)
                   + f"$ {' '.join(task.argv)}\n").encode())
        log.flush()
        try:
            code = run_forwarding_signals(task.argv, log, env, drop=task.elastic)
        except OSError as exc:
            log.write(f"hvdflow rank task: cannot run {task.argv[0]}: {exc.strerror}\n".encode())
            code = 127
    if task.elastic:  # its launcher reads the status and the rank's result itself
        return code if code >= 0 else 128 - code
    host, unix = os.uname().nodename, time.time()
    if code == STOPPED_EXIT:
        RankStopped(rank, host, unix).write(str(logs))
        return code
    reason = exit_reason(code, Path(task.result.format(rank=rank)))
    if reason is not None:
        RankFailed(rank, host, unix, reason).write(str(logs))
        return code if code > 0 else 1 if code == 0 else 128 - code
    return 0


def exit_reason(code: int, result: Path) -> str | None:
    """Why a rank failed, or None if it did not: a non-zero status, a signal, or no result despite status 0.

    udocker has been seen to exit 0 for a rank killed by SIGKILL inside the container, so the rank's result file
    decides as well.
    """
    if code > 0:
        return exit_text(code)
    if code < 0:
        return f"killed by signal {-code}"
    return None if result.exists() else f"exited 0 without writing {result}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
