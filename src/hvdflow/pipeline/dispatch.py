"""The one place where ranks go to a launcher: :func:`launch` takes a :class:`~hvdflow.launch.request.LaunchRequest`
and picks, once, where and how its ranks start: on this machine (Gloo, the host's mpirun, or Horovod's elastic driver
with local workers, :mod:`hvdflow.launch`) or across the nodes of the current Slurm job (the same three,
:mod:`hvdflow.slurm.launch`)."""

from __future__ import annotations

import socket

from hvdflow.errors import LaunchError
from hvdflow.launch import faults
from hvdflow.launch.elastic import ElasticJob, LocalWorkers, launch_elastic
from hvdflow.launch.local import launch_gloo_local, launch_mpi_local, ranks_tmpdir
from hvdflow.launch.request import LaunchRequest
from hvdflow.runtime import Runtime
from hvdflow.slurm.launch import launch_slurm_elastic, launch_slurm_gloo, launch_slurm_mpi


def launch(runtime: Runtime, request: LaunchRequest) -> None:
    """Run the request's ranks to the end with the one launcher it asks for: where it runs (the current Slurm job or
    this machine), then elastic, Gloo or MPI."""
    refused = runtime.refusal(request.launcher)
    if refused is not None:
        raise LaunchError(refused)
    runtime = runtime.for_launcher(request.launcher)
    if request.slurm is not None:
        if request.elastic is not None:
            launch_slurm_elastic(runtime, request)
        elif request.launcher == "gloo":
            launch_slurm_gloo(runtime, request)
        else:
            launch_slurm_mpi(runtime, request)
    elif request.elastic is not None:
        _local_elastic(runtime, request)
    elif request.launcher == "gloo":
        launch_gloo_local(runtime, request)
    else:
        launch_mpi_local(runtime, request)


def _local_elastic(runtime: Runtime, request: LaunchRequest) -> None:
    """An elastic run on this machine: one one-rank slot per slot of the job (each with its cores), Horovod's driver
    in the runtime, workers started here (:mod:`hvdflow.launch.elastic`)."""
    job, cpus = request.job, request.cpus
    slots = faults.elastic_slots(job.ranks)
    with ranks_tmpdir(job.logs_dir) as tmp_env:
        workers = LocalWorkers(runtime, socket.gethostname(), slots, [cpus.cores_of(i) for i in range(slots)],
                               tmp_env, [job.logs_dir, *job.paths()])
        launch_elastic(runtime, workers, ElasticJob.of(request, job.argv(), job.paths(), "127.0.0.1", request.iface))
