"""Horovod ranks on this host: one process per rank over Gloo, or the host's ``mpirun`` (no Slurm).

- Gloo: hvdflow starts Horovod's rendezvous server (from the runtime) and waits until it accepts connections, then
  one process per rank with the Horovod variables of :mod:`hvdflow.launch.rank_env`. No MPI, ssh or horovodrun.
- MPI: the host's ``mpirun`` starts one ``udocker run --hostenv`` per rank; the container's Open MPI must match.
Both run in either runtime (udocker or native, :mod:`hvdflow.runtime`); each rank writes its own log and is
bound to its cores (:mod:`hvdflow.launch.cpus`): Gloo's with ``sched_setaffinity``, MPI's with ``taskset``.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hvdflow.errors import LaunchError
from hvdflow.files.private import RANKS_TMPDIR, UnsafePlace, private_dir, remove_own
from hvdflow.launch.cpus import cpu_list
from hvdflow.launch.rank_env import horovod_gloo_env, placements
from hvdflow.launch.rendezvous import start_rendezvous_server
from hvdflow.launch.request import LaunchRequest
from hvdflow.launch.supervise import ProgressFollower, Supervised, start, stop, supervise, supervise_mpirun
from hvdflow.runtime import Runtime


@contextmanager
def ranks_tmpdir(logs: Path) -> Iterator[dict[str, str]]:
    """``TMPDIR`` for the ranks: a folder beside their logs, the user's alone (0700, never a link followed: see
    :mod:`hvdflow.files.private`), removed when they have gone.

    TensorFlow's AutoGraph writes a temporary file per converted function and deletes them only at a clean exit, so a
    rank that is killed, or stopped with ``os._exit``, would leave them in the host's /tmp (bound into MPI's and
    the native runtime's ranks) for good, where other users of the node see their names.
    """
    tmp = logs / "tmp"
    logs.mkdir(parents=True, exist_ok=True)
    remove_own(tmp)
    try:
        private_dir(tmp, RANKS_TMPDIR)
    except UnsafePlace as exc:
        raise LaunchError(str(exc)) from None
    try:
        yield {"TMPDIR": str(tmp)}
    finally:
        remove_own(tmp)


def launch_gloo_local(runtime: Runtime, request: LaunchRequest) -> None:
    """Run the request's job as Horovod ranks on this host over Gloo, one process each, bound as its CPU plan says,
    supervised, the ranks reaching each other over its ``iface``.

    The job's paths are bound into containers; the logs and the rendezvous server's port file go to its logs folder;
    rank 0's progress lines to the request's ``progress`` (the rule's log).
    """
    job, cpus, iface = request.job, request.cpus, request.iface
    logs, command = job.logs_dir, job.argv()
    logs.mkdir(parents=True, exist_ok=True)
    binds = [logs, *job.paths()]
    server, port = start_rendezvous_server(runtime, logs, binds, runtime.process_env(), "127.0.0.1")
    ranks: list[Supervised] = []
    with ranks_tmpdir(logs) as tmp_env:
        try:
            for placement in placements([(socket.gethostname(), job.ranks)]):
                env = {**horovod_gloo_env(placement, "127.0.0.1", port, iface), **tmp_env}
                ranks.append(start(f"rank {placement.rank}", runtime.command(command, env, binds),
                                   logs / f"rank-{placement.rank}.log", runtime.process_env(), rank=True,
                                   cores=cpus.cores_of(placement.rank)))
            supervise(ranks, request.timeout, follow=ProgressFollower(logs / "rank-0.log", request.progress))
        finally:
            stop(ranks + [server])


def launch_mpi_local(runtime: Runtime, request: LaunchRequest, mpirun: str = "mpirun") -> None:
    """Run the request's job as Horovod ranks started by the host's ``mpirun``, one process each.

    In udocker, ``--hostenv`` hands Open MPI's variables to the container and ``/tmp`` is bound so the ranks reach
    the host's PMIx server. Each rank's output goes to ``logs/rank-N.log``; a rank the CPU plan binds runs under
    ``taskset`` with its cores (Open MPI's own binding stays off: it would bind the ``sh`` to one core each).
    """
    job, cpus, nranks = request.job, request.cpus, request.job.ranks
    logs, command, paths = job.logs_dir, job.argv(), job.paths()
    logs.mkdir(parents=True, exist_ok=True)
    bound = [cpus.cores_of(r) for r in range(nranks)]
    if all(cores is not None for cores in bound):  # the ranks' core lists come first: $1 is rank 0's
        rank_args = [cpu_list(cores) for cores in bound if cores is not None]
        per_rank_log = (f'eval "cores=\\${{$((OMPI_COMM_WORLD_RANK + 1))}}"; shift {nranks}; '
                        'exec taskset -c "$cores" "$@" > "$0-$OMPI_COMM_WORLD_RANK.log" 2>&1')
    else:
        per_rank_log, rank_args = 'exec "$@" > "$0-$OMPI_COMM_WORLD_RANK.log" 2>&1', []
    with ranks_tmpdir(logs) as tmp_env:
        env = {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi", **tmp_env}
        inner = runtime.command(command, env, [logs, *paths], hostenv=True)
        argv = [mpirun, "-np", str(nranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,tcp",
                "sh", "-c", per_rank_log, str(logs / "rank"), *rank_args, *inner]
        supervise_mpirun(start("mpirun", argv, logs / "mpirun.log", runtime.process_env()), logs, request.timeout,
                         request.progress)
