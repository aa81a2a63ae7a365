"""What Slurm tells each task of a job step, mapped to Horovod's placement and to one GPU per local rank.

srun sets, per task: ``SLURM_PROCID`` (global rank), ``SLURM_LOCALID`` (rank on its node), ``SLURM_NODEID`` (the
node's index in the step), ``SLURM_STEP_TASKS_PER_NODE`` (tasks on each node in order, compressed as ``2(x3),1``)
and ``SLURMD_NODENAME``. Under ``mpirun`` the same facts come from Open MPI's ``OMPI_COMM_WORLD_*`` variables.
"""

from __future__ import annotations

import re
from typing import Mapping, Optional

from hvdflow.errors import LaunchError
from hvdflow_wire.placement import Placement

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


def slurm_placement(env: Mapping[str, str]) -> Placement:
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
    return Placement(_int(env, "SLURM_PROCID"), sum(counts), local_rank, counts[node], peers.index(node),
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


def local_size_of(env: Mapping[str, str]) -> int:
    """How many ranks share the rank's node, under srun or under Open MPI's mpirun."""
    if "OMPI_COMM_WORLD_LOCAL_SIZE" in env:
        return _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    counts = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE", ""))
    node = _int(env, "SLURM_NODEID")
    if not 0 <= node < len(counts):
        raise LaunchError(f"SLURM_NODEID={node} but the step has {len(counts)} nodes")
    return counts[node]


def gpu_for_rank(visible: Optional[str], local_rank: int, local_size: int, host: str) -> Optional[str]:
    """The one GPU a rank uses, from the ``CUDA_VISIBLE_DEVICES`` Slurm gave its task; None where it gave none.

    - one device per task (``--gpus-per-task``, ``--gpu-bind=single:1``): the task sees only its own, and uses it;
    - a list the node's tasks share (``--gres=gpu:N``): local rank ``i`` takes the ``i``-th, so no two share one;
    - fewer devices than ranks on the node: LaunchError before training starts, naming the node and the counts.
    """
    ids = [i.strip() for i in (visible or "").split(",") if i.strip() and i.strip() != "NoDevFiles"]
    if not ids:
        return None
    if len(ids) == 1:
        return ids[0]
    if local_rank >= len(ids) or len(ids) < local_size:
        raise LaunchError(f"local rank {local_rank} of {local_size} on {host} has no GPU of its own: the task sees "
                          f"{len(ids)} GPUs ({visible}); request one GPU per rank on every node")
    return ids[local_rank]
