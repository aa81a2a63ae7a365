"""Rank placement and Horovod's Gloo variables, including uneven tasks per host."""

from __future__ import annotations

import pytest

from hvdflow.launch.rank_env import horovod_gloo_env, placements
from hvdflow_wire.placement import Placement


def test_even_hosts() -> None:
    got = [(p.rank, p.local_rank, p.local_size, p.cross_rank, p.cross_size, p.hostname)
           for p in placements([("n1", 2), ("n2", 2)])]
    assert got == [(0, 0, 2, 0, 2, "n1"), (1, 1, 2, 0, 2, "n1"), (2, 0, 2, 1, 2, "n2"), (3, 1, 2, 1, 2, "n2")]


def test_uneven_hosts_follow_horovods_cross_definition() -> None:
    # 2(x2),1: local rank 1 exists only on n1 and n2, so its cross communicator has 2 members, local rank 0 has 3
    got = [(p.rank, p.local_rank, p.cross_rank, p.cross_size) for p in placements([("n1", 2), ("n2", 2), ("n3", 1)])]
    assert got == [(0, 0, 0, 3), (1, 1, 0, 2), (2, 0, 1, 3), (3, 1, 1, 2), (4, 0, 2, 3)]


def test_gloo_env() -> None:
    env = horovod_gloo_env(Placement(1, 2, 1, 2, 0, 1, "vm"), "127.0.0.1", 4242, "lo")
    assert env["HOROVOD_RANK"] == "1" and env["HOROVOD_SIZE"] == "2"
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1" and env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == "4242"
    assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert env["HOROVOD_HOSTNAME"] == "vm" and env["HOROVOD_GLOO_IFACE"] == "lo"


@pytest.mark.parametrize("hosts", [[], [("n1", 0)]])
def test_hosts_without_tasks_are_refused(hosts: list[tuple[str, int]]) -> None:
    with pytest.raises(ValueError, match="at least one task"):
        placements(hosts)


def test_rank_out_of_range() -> None:
    with pytest.raises(ValueError, match="rank 2 outside 0..1"):
        Placement(2, 2, 0, 1, 0, 1, "h")
