"""Decentralised training: each rank averages its model with its neighbours' after every step, no global allreduce.

The form is D-PSGD's "adapt then combine": every rank takes its own optimizer step on its own gradient (its momentum
stays its own), then replaces its weights by the uniform average of its weights and those of its in-neighbours. Models
are averaged, not gradients: averaging gradients over a sparse graph never pulls the ranks' models together again
once they differ, whereas averaging models contracts their differences every step (by the mixing matrix's second
eigenvalue). When the graph is complete (2 ranks, or 3 on a ring) the average after the step is the allreduce
step exactly in real arithmetic, because SGD with momentum is linear in the gradient: that is the equivalence the
tests check.

The exchange is one ``hvd.alltoall`` per step of all the model's weights as one flat float32 vector, a copy per
out-neighbour and an empty split for every other rank; what comes back are the in-neighbours' vectors in rank order.
Every rank sums its own and its in-neighbours' vectors in ascending rank order, so on a complete graph every rank
computes the same sum and the ranks stay bit-identical.

Topologies (directed; uniform weights 1/(in-degree + 1) make the mixing matrix doubly stochastic):

- ``ring``: the ranks before and after (one peer with 2 ranks); any number of ranks >= 2;
- ``exp2``: peers at distances 1, 2, 4, ... n/2 ahead, received from as far behind; n a power of two;
- ``onepeer-exp2``: one peer per step, at distance 2^(step mod log2 n): the exponential graph's mixing for the cost
  of one message; n a power of two.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

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


def flat_weights(variables: list):  # type: ignore[no-untyped-def,type-arg]
    """The variables' values as one flat float32 vector, in order."""
    import tensorflow as tf

    return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in variables], 0)


def assign_flat(variables: list, flat) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Put a flat vector (as :func:`flat_weights` makes) back into the variables."""
    import tensorflow as tf

    offset = 0
    for v in variables:
        size = int(tf.size(v))
        v.assign(tf.cast(tf.reshape(flat[offset:offset + size], v.shape), v.dtype))
        offset += size


class NeighbourAveraging:
    """The exchange after every step, and what it cost: steps and bytes sent, counted per epoch."""

    def __init__(self, topology: str, rank: int, size: int) -> None:
        check_topology(topology, size)
        self.topology, self.rank, self.size = topology, rank, size
        self.bytes_sent = 0
        self.steps = 0

    def average(self, variables: list, step: int) -> None:  # type: ignore[type-arg]
        """Replace ``variables`` by the uniform average of this rank's and its in-neighbours' values at ``step``."""
        import horovod.tensorflow as hvd_tf
        import tensorflow as tf

        send, receive = peers(self.topology, self.size, self.rank, step)
        mine = flat_weights(variables)
        splits = [1 if r in send else 0 for r in range(self.size)]
        rows, received_splits = hvd_tf.alltoall(tf.stack([mine] * len(send)), splits=splits,
                                                name="hvdflow_neighbours")
        got = [int(n) for n in received_splits.numpy()]
        if got != [1 if r in receive else 0 for r in range(self.size)]:
            raise RuntimeError("rank %d expected one model from each of ranks %s at step %d, got splits %s"
                               % (self.rank, receive, step, got))
        contributions: Dict[int, object] = {self.rank: mine}
        contributions.update(zip(receive, tf.unstack(rows)))
        total = None
        for r in sorted(contributions):
            total = contributions[r] if total is None else total + contributions[r]  # type: ignore[operator]
        assign_flat(variables, total / float(len(contributions)))  # type: ignore[operator]
        self.bytes_sent += len(send) * int(mine.shape[0]) * mine.dtype.size
        self.steps += 1

    def epoch_bytes_per_step(self) -> float:
        """Bytes sent per step since the last call (the epoch's), and start counting anew."""
        per_step = self.bytes_sent / self.steps if self.steps else 0.0
        self.bytes_sent, self.steps = 0, 0
        return per_step

    def callback(self, model):  # type: ignore[no-untyped-def]
        """A Keras callback that averages ``model``'s weights (BatchNorm statistics included) after every step.

        The step index is the optimizer's iteration count, which checkpoints keep: a resumed run exchanges with the
        peers the uninterrupted one would have (``onepeer-exp2`` cycles through them).
        """
        import tensorflow as tf

        averaging = self

        class _Average(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
                averaging.average(model.weights, int(model.optimizer.iterations.numpy()) - 1)

        return _Average()


def consensus_distance(variables: list) -> float:  # type: ignore[type-arg]
    """The ranks' mean L2 distance of their weights from the ranks' average (two allreduces: all ranks call it)."""
    import horovod.tensorflow as hvd_tf
    import tensorflow as tf

    # in float64 the sum of the ranks' float32 weights is exact, so ranks that hold one model are 0 apart, not the
    # rounding of a float32 mean
    mine = tf.cast(flat_weights(variables), tf.float64)
    mean = hvd_tf.allreduce(mine, op=hvd_tf.Average, name="hvdflow_consensus_mean")
    distance = tf.norm(mine - mean)
    return float(hvd_tf.allreduce(distance, op=hvd_tf.Average, name="hvdflow_consensus_distance"))


def average_once(variables: list) -> None:  # type: ignore[type-arg]
    """Replace every rank's weights by the ranks' average, one allreduce per variable (the end of a neighbour run)."""
    import horovod.tensorflow as hvd_tf

    for i, v in enumerate(variables):
        v.assign(hvd_tf.allreduce(v.value(), op=hvd_tf.Average, name="hvdflow_final_average_%d" % i))


def communication_callback(model, averaging, size: int):  # type: ignore[no-untyped-def]
    """A Keras callback that puts into each epoch's logs the consensus distance and the bytes a rank sent per step.

    ``averaging`` is the run's :class:`NeighbourAveraging` (None for allreduce training, whose bytes are the ring
    allreduce's of the trainable weights' gradients).
    """
    import tensorflow as tf

    class _Communication(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
            if logs is None:
                return
            if averaging is not None:
                sent = averaging.epoch_bytes_per_step()
            else:
                gradient_bytes = sum(int(tf.size(v)) * v.dtype.size for v in model.trainable_weights)
                sent = float(allreduce_bytes_per_step(size, gradient_bytes))
            logs["consensus_distance"] = consensus_distance(model.weights)
            logs["sent_bytes_per_step"] = sent

    return _Communication()
