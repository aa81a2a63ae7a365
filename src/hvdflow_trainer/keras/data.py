"""This rank's data as a tf.data pipeline: the records :mod:`hvdflow_trainer.input_plan` gives it, shuffled with the
epoch's seed, decoded and batched; and the labels that a non-IID plan sorts by."""

from __future__ import annotations

import time
from typing import Dict, List, Optional

import tensorflow as tf

from ..input_plan import epoch_seed, plan_input
from ..records import parse_fn

LABEL_FEATURES = {"y": tf.io.VarLenFeature(tf.int64)}


def record_labels(record):  # type: ignore[no-untyped-def]
    """A record's labels as a dense vector (a tf.data map function)."""
    return tf.sparse.to_dense(tf.io.parse_single_example(record, LABEL_FEATURES)["y"])


def first_labels(paths: List[str]) -> List[int]:
    """Every record's first label, in the split's record order (-1 for a record without one); reads the split once."""
    return [int(first[0]) if len(first) else -1
            for first in tf.data.TFRecordDataset(paths).map(record_labels).as_numpy_iterator()]


def rank_dataset(paths: List[str], index: Dict[str, object], split: str, rank: int, size: int, batch: int,
                 seed: int, shuffle_buffer: int, epoch: int = 0, skip_batches: int = 0,
                 threads: int = 0, positions: Optional[List[int]] = None):  # type: ignore[no-untyped-def]
    """This rank's batches of ``split`` in ``epoch`` (see input_plan): ``(dataset, records per rank, sharding mode)``.

    Every rank gets the same number of records, so all take the same steps. With ``shuffle_buffer`` > 0 the
    records are shuffled with :func:`epoch_seed`, so an epoch's order depends only on (seed, epoch, ranks, rank)
    and a resumed epoch sees exactly the batches it would have seen; ``skip_batches`` drops the ones already done.
    ``threads`` > 0 gives the pipeline a thread pool of that size (the cores the rank owns). ``positions`` (from
    :func:`~hvdflow_trainer.input_plan.label_sorted_positions`) are the records this rank reads instead of its planned
    share.
    """
    counts = [int(s["records"]) for s in index["splits"][split]["shards"]]  # type: ignore[index]
    if positions is not None:
        mode, per_rank = "by_label", len(positions)
        wanted = [False] * sum(counts)
        for i in positions:
            wanted[i] = True
        mask = tf.constant(wanted)
        data = tf.data.TFRecordDataset(paths).enumerate().filter(lambda i, _: tf.gather(mask, i)).map(lambda _, r: r)
    else:
        try:
            mode, groups, per_rank = plan_input(counts, size)
        except ValueError as exc:
            raise ValueError("split %s: %s" % (split, exc)) from None
        if groups is not None:
            data = tf.data.TFRecordDataset([paths[i] for i in groups[rank]])
        else:
            data = tf.data.TFRecordDataset(paths).shard(size, rank)
    data = data.take(per_rank)
    if shuffle_buffer > 0:
        data = data.shuffle(min(shuffle_buffer, per_rank), seed=epoch_seed(seed, epoch), reshuffle_each_iteration=False)
    data = data.map(parse_fn(index), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(batch)
    # Keras runs one extra, empty step on a dataset of unknown length, which starts a batch that never ends: Horovod's
    # warm-up then raises the learning rate past its target and leaves the momentum corrected into the next epoch
    data = data.apply(tf.data.experimental.assert_cardinality(-(-per_rank // batch)))
    if skip_batches:
        data = data.skip(skip_batches)
    data = data.prefetch(tf.data.AUTOTUNE)
    if threads > 0:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        data = data.with_options(options)
    return data, per_rank, mode


def slowed(dataset, seconds: float):  # type: ignore[no-untyped-def]
    """``dataset`` with ``seconds`` of sleep before each batch (a test's input pipeline that cannot keep up:
    ``--slow-input``); the batches themselves unchanged."""

    def sleep_then(x):  # type: ignore[no-untyped-def]
        time.sleep(seconds)
        return x

    def slow(x, y):  # type: ignore[no-untyped-def]
        waited = tf.py_function(sleep_then, [x], x.dtype)
        waited.set_shape(x.shape)
        return waited, y

    return dataset.map(slow)
