"""How an experiment's ranks lie over Slurm nodes: the train job's task resources, GPUs per node, and the checks
that name an impossible layout before anything is submitted."""

from __future__ import annotations

from pathlib import Path

from hvdflow.config.profile import SlurmCluster
from hvdflow.errors import ConfigError


def gpus_per_node_needed(ranks: int, nodes: int, cluster: SlurmCluster) -> int:
    """GPUs to request on each node (one per rank on the fullest node); 0 on a cluster without GPUs."""
    return max_tasks_per_node(ranks, nodes) if cluster.gpus_per_node > 0 else 0


def gres(ranks: int, nodes: int, cluster: SlurmCluster | None) -> str:
    """The train job's ``gres`` resource: ``gpu:N`` per node, or empty without Slurm or GPUs."""
    if cluster is None or not cluster.gpus_per_node:
        return ""
    return f"gpu:{gpus_per_node_needed(ranks, nodes, cluster)}"


def even_tasks_per_node(ranks: int, nodes: int) -> int:
    """Ranks per node when they divide evenly over the nodes, else 0 (Slurm then places them, at least one each)."""
    return ranks // nodes if ranks % nodes == 0 else 0


def max_tasks_per_node(ranks: int, nodes: int) -> int:
    """The most ranks any node holds in hvdflow's layout: ``ceil(ranks / nodes)``."""
    return -(-ranks // nodes)


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


def check_layout(where: str, ranks: int, nodes: int, cluster: SlurmCluster | None, profile: Path) -> None:
    """ConfigError naming ``where`` if ``ranks`` cannot run on ``nodes`` nodes of the profile's cluster."""
    if nodes > ranks:
        raise ConfigError(f"{where}: nodes ({nodes}) exceeds ranks ({ranks})")
    if nodes > 1 and cluster is None:
        raise ConfigError(f"{where}: nodes {nodes} needs a Slurm profile; {profile} runs on one machine")
    if cluster is not None and cluster.gpus_per_node:
        needed = gpus_per_node_needed(ranks, nodes, cluster)
        if needed > cluster.gpus_per_node:
            raise ConfigError(f"{where}: {ranks} ranks on {nodes} node(s) need {needed} GPUs per node (one per rank), "
                              f"but {profile} declares gpus_per_node: {cluster.gpus_per_node}")
