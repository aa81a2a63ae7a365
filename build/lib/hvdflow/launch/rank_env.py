"""Where each Horovod rank sits, and the environment variables that tell Horovod so (Gloo controller).

The variables are those Horovod's Gloo context reads (``horovod/common/gloo/gloo_context.cc``); LOCAL and CROSS follow
``horovod.runner.common.util.hosts.get_host_assignments``: the cross communicator of a rank holds the ranks with the
same local rank on other hosts.
"""

from __future__ import annotations

from hvdflow_wire.placement import Placement


def placements(tasks_per_host: list[tuple[str, int]]) -> list[Placement]:
    """Ranks in order over hosts given as ``(hostname, tasks)``, block distribution, uneven counts allowed."""
    if not tasks_per_host or any(count < 1 for _, count in tasks_per_host):
        raise ValueError(f"every host needs at least one task: {tasks_per_host}")
    size = sum(count for _, count in tasks_per_host)
    result = []
    rank = 0
    for host_index, (host, count) in enumerate(tasks_per_host):
        for local_rank in range(count):
            peers = [i for i, (_, c) in enumerate(tasks_per_host) if c > local_rank]
            result.append(Placement(rank, size, local_rank, count, peers.index(host_index), len(peers), host))
            rank += 1
    return result


def horovod_gloo_env(placement: Placement, rendezvous_addr: str, rendezvous_port: int, iface: str) -> dict[str, str]:
    """The environment of one rank for Horovod's Gloo controller, with the rendezvous server at addr:port."""
    return {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous_port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": iface,
        "HOROVOD_RANK": str(placement.rank),
        "HOROVOD_SIZE": str(placement.size),
        "HOROVOD_LOCAL_RANK": str(placement.local_rank),
        "HOROVOD_LOCAL_SIZE": str(placement.local_size),
        "HOROVOD_CROSS_RANK": str(placement.cross_rank),
        "HOROVOD_CROSS_SIZE": str(placement.cross_size),
        "HOROVOD_HOSTNAME": placement.hostname,
        "PYTHONUNBUFFERED": "1",
    }
