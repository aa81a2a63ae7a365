"""How many ranks each node holds in hvdflow's layout, the GPUs that asks of a node, and the check that names a
layout the profile's cluster cannot hold (:mod:`hvdflow.slurm.layout` turns a layout into a job's resources)."""

from __future__ import annotations

from pathlib import Path

from hvdflow.config.profile import SlurmCluster
from hvdflow.errors import ConfigError


def max_tasks_per_node(ranks: int, nodes: int) -> int:
    """The most ranks any node holds in hvdflow's layout: ``ceil(ranks / nodes)``."""
    return -(-ranks // nodes)


def gpus_per_node_needed(ranks: int, nodes: int, cluster: SlurmCluster) -> int:
    """GPUs to request on each node (one per rank on the fullest node); 0 on a cluster without GPUs."""
    return max_tasks_per_node(ranks, nodes) if cluster.gpus_per_node > 0 else 0


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
