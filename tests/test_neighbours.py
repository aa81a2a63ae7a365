"""The neighbour strategy's pure parts: the graphs, the bytes they send, and the experiment keys that choose them."""

from __future__ import annotations

import pytest

from hvdflow.config import experiment as host
from hvdflow.config.experiment import TrainSpec
from hvdflow.errors import LaunchError
from hvdflow_trainer import frameworks, neighbours
from hvdflow_trainer.neighbours import allreduce_bytes_per_step, check_topology, neighbour_bytes_per_step, peers

SPEC = {"ranks": 4, "model": "mlp", "hidden_units": 64, "epochs": 3, "batch_size": 32, "learning_rate": 0.01,
        "momentum": 0.9, "warmup_epochs": 1, "seed": 1234}


def test_the_host_knows_the_trainers_topologies_frameworks_and_distributed_modes() -> None:
    assert host.TOPOLOGIES == neighbours.TOPOLOGIES
    assert (host.FRAMEWORKS, host.DISTRIBUTED) == (tuple(frameworks.FRAMEWORKS), frameworks.DISTRIBUTED)
    assert {name: f.distributed for name, f in frameworks.FRAMEWORKS.items()} == {"tensorflow": ("horovod",),
                                                                               "pytorch": host.DISTRIBUTED}
    assert host.POWER_OF_TWO_TOPOLOGIES == neighbours.POWER_OF_TWO


@pytest.mark.parametrize("topology, size, rank, step, expected", [
    ("ring", 2, 0, 0, ([1], [1])),
    ("ring", 3, 0, 0, ([1, 2], [1, 2])),
    ("ring", 5, 0, 7, ([1, 4], [1, 4])),
    ("exp2", 2, 1, 0, ([0], [0])),
    ("exp2", 8, 0, 0, ([1, 2, 4], [4, 6, 7])),
    ("exp2", 8, 5, 3, ([1, 6, 7], [1, 3, 4])),
    ("onepeer-exp2", 8, 0, 0, ([1], [7])),
    ("onepeer-exp2", 8, 0, 1, ([2], [6])),
    ("onepeer-exp2", 8, 0, 2, ([4], [4])),
    ("onepeer-exp2", 8, 0, 3, ([1], [7])),
])
def test_peers(topology: str, size: int, rank: int, step: int, expected: tuple[list[int], list[int]]) -> None:
    assert peers(topology, size, rank, step) == expected


@pytest.mark.parametrize("topology, size", [(t, n) for t in neighbours.TOPOLOGIES for n in (2, 3, 4, 6, 8, 16)
                                            if t not in neighbours.POWER_OF_TWO or not n & (n - 1)])
def test_every_message_sent_is_expected_and_the_mixing_matrix_is_doubly_stochastic(topology: str, size: int) -> None:
    for step in range(4):
        graph = {r: peers(topology, size, r, step) for r in range(size)}
        sent = sorted((r, q) for r, (send, _) in graph.items() for q in send)
        expected = sorted((q, r) for r, (_, receive) in graph.items() for q in receive)
        assert sent == expected  # alltoall's splits on both sides agree
        # uniform weights 1/(in-degree + 1): rows sum to 1 by construction; columns too, as every rank has the same
        # in- and out-degree, so the ranks' average is kept by every exchange
        weights = [[0.0] * size for _ in range(size)]
        for r, (_, receive) in graph.items():
            for q in [r, *receive]:
                weights[r][q] = 1 / (len(receive) + 1)
        assert all(sum(weights[r][q] for r in range(size)) == pytest.approx(1) for q in range(size))


@pytest.mark.parametrize("topology, size, message", [
    ("ring", 1, "topology ring needs at least 2 ranks, got 1"),
    ("exp2", 3, "topology exp2 needs a power-of-two number of ranks, got 3"),
    ("onepeer-exp2", 6, "topology onepeer-exp2 needs a power-of-two number of ranks, got 6"),
    ("torus", 4, "topology 'torus' is not one of ring, exp2, onepeer-exp2"),
])
def test_bad_counts_are_refused(topology: str, size: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_topology(topology, size)


def test_bytes_per_step_follow_the_formulas() -> None:
    d = 4810 * 4  # the digits MLP: 4,810 float32 weights
    assert neighbour_bytes_per_step("ring", 2, d) == d  # both neighbours are the same rank
    assert neighbour_bytes_per_step("ring", 64, d) == 2 * d
    assert neighbour_bytes_per_step("exp2", 64, d) == 6 * d
    assert neighbour_bytes_per_step("onepeer-exp2", 64, d) == d
    assert allreduce_bytes_per_step(1, d) == 0
    assert allreduce_bytes_per_step(2, d) == d
    assert allreduce_bytes_per_step(4, d) == 3 * d // 2


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "neighbour", "ranks": 1, "nodes": 1}, "strategy neighbour needs at least 2 ranks"),
    ({"strategy": "neighbour", "topology": "exp2", "ranks": 3},
     "topology exp2 needs a power-of-two number of ranks, got ranks 3"),
    ({"strategy": "neighbour", "topology": "onepeer-exp2", "ranks": 6}, "topology onepeer-exp2 needs a power-of-two"),
    ({"topology": "ring"}, "topology ring is for strategy neighbour; this experiment's strategy is allreduce"),
    ({"strategy": "gossip"}, "strategy must be one of allreduce, neighbour, got 'gossip'"),
    ({"strategy": "neighbour", "topology": "torus"}, "topology must be one of ring, exp2, onepeer-exp2, got 'torus'"),
    ({"shard_order": "sorted"}, "shard_order must be one of shuffled, by_label, got 'sorted'"),
])
def test_experiment_keys_that_cannot_work_together_are_named(changes: dict[str, object], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        TrainSpec.from_config({**SPEC, **changes})


def test_the_trainer_is_told_the_strategy() -> None:
    args = TrainSpec.from_config({**SPEC, "strategy": "neighbour", "topology": "exp2", "shard_order": "by_label"}
                                 ).trainer_args()
    assert args[args.index("--strategy") + 1] == "neighbour"
    assert args[args.index("--topology") + 1] == "exp2"
    assert args[args.index("--shard-order") + 1] == "by_label"
    plain = TrainSpec.from_config(SPEC).trainer_args()
    assert plain[plain.index("--strategy") + 1] == "allreduce" and plain[plain.index("--shard-order") + 1] == "shuffled"
