"""Neighbour averaging inside TensorFlow's compiled training step (the graphs: :mod:`hvdflow_trainer.neighbours`).

The exchange is one ``hvd.alltoall`` per step of all the model's weights as one flat float32 vector, a copy per
out-neighbour and an empty split for every other rank; what comes back are the in-neighbours' vectors in rank order.
It runs inside the compiled training step: the optimizer is wrapped (:meth:`NeighbourAveraging.wrap`) so that its
step is followed by the exchange, as Horovod's DistributedOptimizer puts its allreduce before the step.
Every rank sums its own and its in-neighbours' vectors stacked in ascending rank order, in one reduction, so on a
complete graph every rank computes the same sum and the ranks stay bit-identical.
"""

from __future__ import annotations

from typing import Dict, Optional

import horovod.tensorflow as hvd_tf
import tensorflow as tf

from ..neighbours import allreduce_bytes_per_step, check_topology, peers
from .step_times import Stopwatch


def flat_weights(variables: list):  # type: ignore[no-untyped-def,type-arg]
    """The variables' values as one flat float32 vector, in order."""

    return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in variables], 0)


def assign_flat(variables: list, flat) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Put a flat vector (as :func:`flat_weights` makes) back into the variables."""

    offset = 0
    for v in variables:
        size = v.shape.num_elements()
        v.assign(tf.cast(tf.reshape(flat[offset:offset + size], v.shape), v.dtype))
        offset += size


class AveragingStep:
    """Put before an optimizer's class (:meth:`NeighbourAveraging.wrap` does): after each of its steps, the model's
    weights are averaged with the neighbours' at that step, the optimizer's iteration count (from 0)."""

    def apply_gradients(self, grads_and_vars, *args, **kwargs):  # type: ignore[no-untyped-def]
        """The optimizer's own step, then the exchange."""
        applied = super().apply_gradients(grads_and_vars, *args, **kwargs)  # type: ignore[misc]
        self.neighbour_averaging.average(self.averaged_model.weights, self.iterations - 1)  # type: ignore[attr-defined]
        return applied


class NeighbourAveraging:
    """The exchange after every step, inside the compiled training step, and what it sent (counted per epoch)."""

    def __init__(self, topology: str, rank: int, size: int) -> None:
        import tensorflow as tf

        check_topology(topology, size)
        self.topology, self.rank, self.size = topology, rank, size
        self.bytes_sent = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvdflow_bytes_sent")
        self.exchanges = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvdflow_exchanges")
        self.stopwatch: Optional[Stopwatch] = None
        """What times the exchange in each step (:mod:`.step_times`), where the run measures its steps."""

    def average(self, variables: list, step) -> None:  # type: ignore[no-untyped-def,type-arg]
        """Replace ``variables`` by the uniform average of this rank's and its in-neighbours' values at ``step`` (a
        scalar tensor: the global step, from 0)."""

        mine = flat_weights(variables)
        if self.topology == "onepeer-exp2":
            distance = tf.bitwise.left_shift(1, tf.cast(step % (self.size.bit_length() - 1), tf.int32))
            splits = tf.one_hot((self.rank + distance) % self.size, self.size, dtype=tf.int32)
            expected = tf.one_hot((self.rank - distance) % self.size, self.size, dtype=tf.int32)
            sent = tf.expand_dims(mine, 0)
            rows, received = self._exchange(sent, splits)
            # two terms: IEEE addition is commutative, so both ranks of a pair compute the same sum
            total, count = mine + rows[0], 2
        else:
            send, receive = peers(self.topology, self.size, self.rank, 0)
            expected = tf.constant([1 if r in receive else 0 for r in range(self.size)], tf.int32)
            sent = tf.stack([mine] * len(send))
            rows, received = self._exchange(sent, [1 if r in send else 0 for r in range(self.size)])
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

    def _exchange(self, sent, splits):  # type: ignore[no-untyped-def]
        """``(rows received, rows per sender)``: Horovod's alltoall of ``sent`` (timed where the steps are)."""
        def alltoall(rows):  # type: ignore[no-untyped-def]
            return hvd_tf.alltoall(rows, splits=splits, name="hvdflow_neighbours")

        return alltoall(sent if self.stopwatch is None else self.stopwatch.begun_after(sent))

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
        wrapped = type("_Neighbours", (AveragingStep, optimizer.__class__), {}).from_config(optimizer.get_config())
        wrapped.neighbour_averaging, wrapped.averaged_model = self, model
        return wrapped


def consensus_distance(variables: list) -> float:  # type: ignore[type-arg]
    """The ranks' mean L2 distance of their weights from the ranks' average (two allreduces: all ranks call it)."""

    # in float64 the sum of the ranks' float32 weights is exact, so ranks that hold one model are 0 apart, not the
    # rounding of a float32 mean
    mine = tf.cast(flat_weights(variables), tf.float64)
    mean = hvd_tf.allreduce(mine, op=hvd_tf.Average, name="hvdflow_consensus_mean")
    distance = tf.norm(mine - mean)
    return float(hvd_tf.allreduce(distance, op=hvd_tf.Average, name="hvdflow_consensus_distance"))


def average_once(variables: list) -> None:  # type: ignore[type-arg]
    """Replace every rank's weights by the ranks' average, one allreduce per variable (the end of a neighbour run)."""

    for i, v in enumerate(variables):
        v.assign(hvd_tf.allreduce(v.value(), op=hvd_tf.Average, name="hvdflow_final_average_%d" % i))


class Communication(tf.keras.callbacks.Callback):
    """A Keras callback that puts into each epoch's logs the consensus distance and the bytes a rank sent per step.

    ``averaging`` is the run's :class:`NeighbourAveraging` (None for allreduce training, whose bytes are the ring
    allreduce's of the trainable weights' gradients).
    """

    def __init__(self, model, averaging: Optional[NeighbourAveraging], size: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.trained, self.averaging, self.size = model, averaging, size

    def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
        if logs is None:
            return
        if self.averaging is not None:
            sent = self.averaging.epoch_bytes_per_step()
        else:
            gradient_bytes = sum(int(tf.size(v)) * v.dtype.size for v in self.trained.trainable_weights)
            sent = float(allreduce_bytes_per_step(self.size, gradient_bytes))
        logs["consensus_distance"] = consensus_distance(self.trained.weights)
        logs["sent_bytes_per_step"] = sent
