"""Decentralised training: each rank averages its model with its neighbours' after every step, no global allreduce.

The form is D-PSGD's "adapt then combine": every rank takes its own optimizer step on its own gradient (its momentum
stays its own), then replaces its weights by the uniform average of its weights and those of its in-neighbours. Models
are averaged, not gradients: averaging gradients over a sparse graph never pulls the ranks' models together again
once they differ, whereas averaging models contracts their differences every step (by the mixing matrix's second
eigenvalue). When the graph is complete (2 ranks, or 3 on a ring) the average after the step is the allreduce
step exactly in real arithmetic, because SGD with momentum is linear in the gradient: that is the equivalence the
tests check.

Topologies (directed; uniform weights 1/(in-degree + 1) make the mixing matrix doubly stochastic):

- ``ring``: the ranks before and after (one peer with 2 ranks); any number of ranks >= 2;
- ``exp2``: peers at distances 1, 2, 4, ... n/2 ahead, received from as far behind; n a power of two;
- ``onepeer-exp2``: one peer per step, at distance 2^(step mod log2 n): the exponential graph's mixing for the cost
  of one message; n a power of two.

This module holds the graphs and the bytes they send (framework-neutral); the exchange inside TensorFlow's compiled
step, the consensus distance and the final average are :mod:`hvdflow_trainer.keras.neighbours`.
"""

from __future__ import annotations

from typing import List, Tuple

TOPOLOGIES = ("ring", "exp2", "onepeer-exp2")
POWER_OF_TWO = ("exp2", "onepeer-exp2")


def check_topology(topology: str, size: int) -> None:
    """ValueError naming the topology if it cannot join ``size`` ranks."""
    if topology not in TOPOLOGIES:
        raise ValueError("topology %r is not one of %s" % (topology, ", ".join(TOPOLOGIES)))
    if size < 2:
        raise ValueError("topology %s needs at least 2 ranks, got %d" % (topology, size))
    if topology in POWER_OF_TWO and size & (size - 1):
        raise ValueError("topology %s needs a power-of-two number of ranks, got %d" % (topology, size))


def peers(topology: str, size: int, rank: int, step: int) -> Tuple[List[int], List[int]]:
    """``(send to, receive from)``: the ranks ``rank`` exchanges with at ``step`` (0-based, global), ascending."""
    check_topology(topology, size)
    if topology == "ring":
        distances = [1, -1]
    else:
        hops = [2 ** k for k in range(size.bit_length() - 1)]
        distances = hops if topology == "exp2" else [hops[step % len(hops)]]
    send = sorted({(rank + d) % size for d in distances} - {rank})
    receive = sorted({(rank - d) % size for d in distances} - {rank})
    return send, receive


def neighbour_bytes_per_step(topology: str, size: int, model_bytes: int) -> int:
    """Bytes one rank sends per step: one copy of the model per out-neighbour."""
    return len(peers(topology, size, 0, 0)[0]) * model_bytes


def allreduce_bytes_per_step(size: int, gradient_bytes: int) -> int:
    """Bytes one rank sends per step in a ring allreduce of the gradients (reduce-scatter, then allgather)."""
    return 2 * (size - 1) * gradient_bytes // size
