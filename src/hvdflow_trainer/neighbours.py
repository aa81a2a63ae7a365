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
It runs inside the compiled training step: the optimizer is wrapped (:meth:`NeighbourAveraging.wrap`) so that its
step is followed by the exchange, as Horovod's DistributedOptimizer puts its allreduce before the step.
Every rank sums its own and its in-neighbours' vectors stacked in ascending rank order, in one reduction, so on a
complete graph every rank computes the same sum and the ranks stay bit-identical.

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
        size = v.shape.num_elements()
        v.assign(tf.cast(tf.reshape(flat[offset:offset + size], v.shape), v.dtype))
        offset += size


class NeighbourAveraging:
    """The exchange after every step, inside the compiled training step, and what it sent (counted per epoch)."""

    def __init__(self, topology: str, rank: int, size: int) -> None:
        import tensorflow as tf

        check_topology(topology, size)
        self.topology, self.rank, self.size = topology, rank, size
        self.bytes_sent = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvdflow_bytes_sent")
        self.exchanges = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvdflow_exchanges")

    def average(self, variables: list, step) -> None:  # type: ignore[no-untyped-def,type-arg]
        """Replace ``variables`` by the uniform average of this rank's and its in-neighbours' values at ``step`` (a
        scalar tensor: the global step, from 0)."""
        import horovod.tensorflow as hvd_tf
        import tensorflow as tf

        mine = flat_weights(variables)
        if self.topology == "onepeer-exp2":
            distance = tf.bitwise.left_shift(1, tf.cast(step % (self.size.bit_length() - 1), tf.int32))
            splits = tf.one_hot((self.rank + distance) % self.size, self.size, dtype=tf.int32)
            expected = tf.one_hot((self.rank - distance) % self.size, self.size, dtype=tf.int32)
            sent = tf.expand_dims(mine, 0)
            rows, received = hvd_tf.alltoall(sent, splits=splits, name="hvdflow_neighbours")
            # two terms: IEEE addition is commutative, so both ranks of a pair compute the same sum
            total, count = mine + rows[0], 2
        else:
            send, receive = peers(self.topology, self.size, self.rank, 0)
            expected = tf.constant([1 if r in receive else 0 for r in range(self.size)], tf.int32)
            sent = tf.stack([mine] * len(send))
            rows, received = hvd_tf.alltoall(sent, splits=[1 if r in send else 0 for r in range(self.size)],
                                             name="hvdflow_neighbours")
            contributions: Dict[int, object] = {self.rank: mine}
            contributions.update(zip(receive, tf.unstack(rows, num=len(receive))))
            # one reduction over the vectors stacked in rank order: on a complete graph every rank sums the same
            # stack the same way (a chain of adds would be reordered by TensorFlow's graph optimizer, rank by rank)
            total = tf.reduce_sum(tf.stack([contributions[r] for r in sorted(contributions)]), axis=0)
            count = len(contributions)
        check = tf.debugging.assert_equal(tf.cast(received, tf.int32), expected,
                                          message="rank %d: a neighbour's model is missing or extra" % self.rank)
        with tf.control_dependencies([check]):
            assign_flat(variables, total / float(count))  # type: ignore[operator]
        self.bytes_sent.assign_add(tf.size(sent, out_type=tf.int64) * mine.dtype.size)
        self.exchanges.assign_add(1)

    def epoch_bytes_per_step(self) -> float:
        """Bytes sent per exchange since the last call (the epoch's), and start counting anew."""
        sent, exchanges = int(self.bytes_sent.numpy()), int(self.exchanges.numpy())
        self.bytes_sent.assign(0)
        self.exchanges.assign(0)
        return sent / exchanges if exchanges else 0.0

    def wrap(self, optimizer, model):  # type: ignore[no-untyped-def]
        """``optimizer`` made to average ``model``'s weights (BatchNorm statistics included) with the neighbours'
        after each of its steps, inside the compiled training step (as Horovod's DistributedOptimizer allreduces).

        The step index is the optimizer's iteration count, which checkpoints keep: a resumed run exchanges with the
        peers the uninterrupted one would have (``onepeer-exp2`` cycles through them).
        """
        averaging = self

        class _Neighbours(optimizer.__class__):  # type: ignore[misc,name-defined]
            def apply_gradients(self, grads_and_vars, *args, **kwargs):  # type: ignore[no-untyped-def]
                applied = super().apply_gradients(grads_and_vars, *args, **kwargs)
                averaging.average(model.weights, self.iterations - 1)
                return applied

        return _Neighbours.from_config(optimizer.get_config())


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
