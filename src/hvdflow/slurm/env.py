"""What Slurm tells each task of a job step, mapped to Horovod's placement and to one GPU per local rank.

srun sets, per task: ``SLURM_PROCID`` (global rank), ``SLURM_LOCALID`` (rank on its node), ``SLURM_NODEID`` (the
node's index in the step), ``SLURM_STEP_TASKS_PER_NODE`` (tasks on each node in order, compressed as ``2(x3),1``)
and ``SLURMD_NODENAME``. Under ``mpirun`` the same facts come from Open MPI's ``OMPI_COMM_WORLD_*`` variables.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

from hvdflow.errors import LaunchError
from hvdflow.launch.rank_env import RankPlacement

_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_tasks_per_node(value: str) -> list[int]:
    """Slurm's compressed task counts (``2(x2),1``) as one count per node (``[2, 2, 1]``)."""
    counts: list[int] = []
    for part in value.split(","):
        match = _COUNT.match(part.strip())
        if not match:
            raise LaunchError(f"cannot read Slurm's tasks per node {value!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        raise LaunchError(f"${name} is not set to a number: not a task of a Slurm job step (started by srun)?") from None


def slurm_placement(env: Mapping[str, str]) -> RankPlacement:
    """This task's Horovod placement from srun's variables; any distribution, uneven counts per node allowed.

    The cross communicator of a rank holds the ranks with its local rank on other nodes, in node order.
    """
    counts = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    node = _int(env, "SLURM_NODEID")
    local_rank = _int(env, "SLURM_LOCALID")
    if not 0 <= node < len(counts):
        raise LaunchError(f"SLURM_NODEID={node} but the step has {len(counts)} nodes")
    peers = [i for i, count in enumerate(counts) if count > local_rank]
    hostname = env.get("SLURMD_NODENAME") or env.get("HOSTNAME") or f"node{node}"
    return RankPlacement(_int(env, "SLURM_PROCID"), sum(counts), local_rank, counts[node], peers.index(node),
                         len(peers), hostname)


def local_rank_of(env: Mapping[str, str]) -> int:
    """The rank's index on its node, under srun or under Open MPI's mpirun."""
    if "OMPI_COMM_WORLD_LOCAL_RANK" in env:
        return _int(env, "OMPI_COMM_WORLD_LOCAL_RANK")
    return _int(env, "SLURM_LOCALID")


def global_rank_of(env: Mapping[str, str]) -> int:
    """The rank's global index, under srun or under Open MPI's mpirun."""
    if "OMPI_COMM_WORLD_RANK" in env:
        return _int(env, "OMPI_COMM_WORLD_RANK")
    return _int(env, "SLURM_PROCID")


def gpu_for_local_rank(visible: Optional[str], local_rank: int, host: str) -> Optional[str]:
    """The one GPU a rank uses: the ``local_rank``-th of the node's visible GPUs, or None where none are visible.

    Slurm sets ``CUDA_VISIBLE_DEVICES`` to the GPUs the step holds on the node; Horovod's recipe pins one per local
    rank, so no two ranks on a node share one.
    """
    ids = [i for i in (visible or "").split(",") if i.strip() and i.strip() != "NoDevFiles"]
    if not ids:
        return None
    if local_rank >= len(ids):
        raise LaunchError(f"local rank {local_rank} on {host} has no GPU of its own: the step holds {len(ids)} GPUs "
                          f"there ({visible}); request at least as many GPUs per node as ranks per node")
    return ids[local_rank].strip()
