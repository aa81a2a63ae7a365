"""Smoke training: a small Keras MLP on scikit-learn's digits with Horovod, deterministic.

Each rank trains on its shard, follows Horovod's Keras recipe, and writes ``rank-<r>.json`` with the sha256 of its
final weights, so the launcher can check that every rank ended with bit-identical weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
from typing import List, Optional


def weights_sha256(weights: list) -> str:
    """sha256 over the bytes of a model's weight arrays, in order."""
    sha = hashlib.sha256()
    for array in weights:
        sha.update(array.tobytes())
    return sha.hexdigest()


def train(epochs: int, batch_size: int, learning_rate: float, seed: int, fail_rank: int) -> dict:
    """Train and return this rank's result; ``fail_rank`` >= 0 makes that rank exit with status 3 after init."""
    import horovod
    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    hvd.init()
    if hvd.rank() == fail_rank:
        raise SystemExit(3)
    tf.keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    features, labels = load_digits(return_X_y=True)
    features = (features / 16.0).astype("float32")
    order = np.random.RandomState(seed).permutation(len(labels))
    features, labels = features[order], labels[order]
    shard = slice(hvd.rank(), None, hvd.size())

    model = tf.keras.Sequential([
        tf.keras.Input(shape=(64,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10, activation="softmax"),
    ])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate * hvd.size(), momentum=0.9))
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    history = model.fit(features[shard], labels[shard], batch_size=batch_size, epochs=epochs, shuffle=False,
                        callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
    _, accuracy = model.evaluate(features, labels, verbose=0)
    return {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "local_rank": hvd.local_rank(),
        "local_size": hvd.local_size(),
        "hostname": socket.gethostname(),
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
        "weights_sha256": weights_sha256(model.get_weights()),
        "final_loss": float(history.history["loss"][-1]),
        "accuracy_all_digits": float(accuracy),
        "tensorflow": tf.__version__,
        "horovod": horovod.__version__,
    }


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.smoke --out DIR``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for rank-<r>.json")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="per rank; scaled by the number of ranks")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--fail-rank", type=int, default=-1, help="make this rank exit with status 3 (for tests)")
    args = parser.parse_args(argv)
    result = train(args.epochs, args.batch_size, args.learning_rate, args.seed, args.fail_rank)
    path = os.path.join(args.out, "rank-%d.json" % result["rank"])
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
