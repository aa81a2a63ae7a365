"""How an experiment's ranks lie over Slurm nodes: the train job's task resources and GPUs per node (the ranks per
node, and the check that names an impossible layout before anything is submitted: :mod:`hvdflow.config.layout`)."""

from __future__ import annotations

from hvdflow.config.layout import gpus_per_node_needed, max_tasks_per_node
from hvdflow.config.profile import SlurmCluster


def gres(ranks: int, nodes: int, cluster: SlurmCluster | None) -> str:
    """The train job's ``gres`` resource: ``gpu:N`` (or ``gpu:<type>:N``) per node, or empty without Slurm or GPUs."""
    if cluster is None or not cluster.gpus_per_node:
        return ""
    return cluster.gpu_gres(gpus_per_node_needed(ranks, nodes, cluster))


def even_tasks_per_node(ranks: int, nodes: int) -> int:
    """Ranks per node when they divide evenly over the nodes, else 0 (Slurm then places them, at least one each)."""
    return ranks // nodes if ranks % nodes == 0 else 0


def job_task_resources(ranks: int, nodes: int, cluster: SlurmCluster | None, elastic: bool = False
                       ) -> dict[str, int | str]:
    """The train job's Snakemake resources for the Slurm plugin's MPI-style job (its rule body starts the steps).

    An even layout is asked for per node (``tasks_per_node``). An uneven one asks for ``tasks`` with
    ``--ntasks-per-node`` as a maximum beside it (through ``slurm_extra``: the plugin takes only one of its two task
    resources), otherwise Slurm may pack more ranks on one node than it has GPUs: 5 ranks on 2 nodes of 4 CPUs become
    4 + 1, not 3 + 2. 0 means "not set" to the plugin. ``tasks_per_gpu=0`` stops the plugin from adding
    ``--ntasks-per-gpu`` (it would take the task count); a single rank is not an MPI job. ``slurm_extra`` also asks
    for the warning signal before the time limit (``--signal=USR1@<grace>``, to every job step, not the batch shell,
    which is the plugin's wrapper) and keeps the job's log across requeues (``--open-mode=append``). An ``elastic``
    run's job also asks for ``--no-kill``: a node that fails leaves the job instead of ending it.
    """
    per_node = even_tasks_per_node(ranks, nodes)
    even = per_node > 1
    extra = [] if even or nodes == 1 else [f"--ntasks-per-node={max_tasks_per_node(ranks, nodes)}"]
    if cluster is not None:
        if cluster.signal_grace_seconds:
            extra.append(f"--signal=USR1@{cluster.signal_grace_seconds}")
        extra.append("--open-mode=append")
        if elastic:
            extra.append("--no-kill")
    return {"tasks": 0 if even else ranks, "tasks_per_node": per_node if even else 0, "tasks_per_gpu": 0,
            "mpi": "srun" if ranks > 1 else "", "slurm_extra": " ".join(extra)}

