"""Data-parallel training with Horovod's Keras API on a prepared dataset, deterministic.

Follows Horovod's Keras recipe in order: init, one GPU per local rank, learning rate scaled by the number of ranks,
distributed optimizer, broadcast / metric-average / warm-up callbacks, checkpoints and logs on rank 0 only, and
every rank reading its own equal share of the shards. Each rank writes ``rank-<r>.json`` (placement, versions and
the sha256 of its final weights); rank 0 writes the model, ``history.csv``, TensorBoard logs and ``metrics.json``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from typing import Dict, List, Optional

from hvdflow_index import read_index, verified_shards, write_json

from .input_plan import plan_input
from .records import parse_fn


def weights_sha256(weights: list) -> str:  # type: ignore[type-arg]
    """sha256 over the bytes of a model's weight arrays, in order."""
    import hashlib

    sha = hashlib.sha256()
    for array in weights:
        sha.update(array.tobytes())
    return sha.hexdigest()


def rank_dataset(paths: List[str], index: Dict[str, object], split: str, rank: int, size: int, batch: int,
                 seed: int, shuffle_buffer: int):  # type: ignore[no-untyped-def]
    """This rank's share of ``split`` (see input_plan): ``(dataset, records per rank, sharding mode)``.

    Every rank gets the same number of records, so all take the same steps. With ``shuffle_buffer`` > 0 the
    records are shuffled, with the seed, anew each epoch.
    """
    import tensorflow as tf

    counts = [int(s["records"]) for s in index["splits"][split]["shards"]]  # type: ignore[index]
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
        data = data.shuffle(min(shuffle_buffer, per_rank), seed=seed, reshuffle_each_iteration=True)
    data = data.map(parse_fn(index), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return data.batch(batch).prefetch(tf.data.AUTOTUNE), per_rank, mode


class EpochFailure:
    """Test hook: make one rank exit with status 3, or die of SIGKILL, at the end of a given epoch."""

    def __init__(self, rank: int, epoch: int, kill: bool = False) -> None:
        self.rank, self.epoch, self.kill = rank, epoch, kill

    def callback(self, my_rank: int):  # type: ignore[no-untyped-def]
        """A Keras callback that exits this process when it is the failing rank and epoch."""
        import tensorflow as tf

        failure = self

        class _Fail(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                if my_rank == failure.rank and epoch + 1 == failure.epoch:
                    how = "killing itself (SIGKILL)" if failure.kill else "exiting with status 3"
                    print("rank %d: %s on purpose after epoch %d" % (my_rank, how, epoch + 1), flush=True)
                    if failure.kill:
                        os.kill(os.getpid(), signal.SIGKILL)
                    os._exit(3)

        return _Fail()


def average_statistics_callback():  # type: ignore[no-untyped-def]
    """A Keras callback that averages the non-trainable weights (BatchNorm's moving mean and variance) over the ranks
    at the end of every epoch.

    Horovod averages gradients only, so each rank's BatchNorm statistics follow its own share of the data and the
    ranks would end with different models; averaging them keeps the ranks identical (and, with tensor fusion off,
    reproducible).
    """
    import horovod.tensorflow as hvd_tf
    import tensorflow as tf

    class _Average(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
            for i, weight in enumerate(self.model.non_trainable_weights):
                weight.assign(hvd_tf.allreduce(weight.value(), op=hvd_tf.Average, name="non_trainable_%d" % i))

    return _Average()


class EpochTimer:
    """Wall time of every epoch, and when the first training step began, measured on each rank."""

    def __init__(self) -> None:
        self.seconds: List[float] = []
        self.first_step_unix: Optional[float] = None

    def callback(self):  # type: ignore[no-untyped-def]
        """The Keras callback that records the times."""
        import tensorflow as tf

        timer = self

        class _Timer(tf.keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                self.start = time.perf_counter()

            def on_train_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
                if timer.first_step_unix is None:
                    timer.first_step_unix = time.time()

            def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                timer.seconds.append(time.perf_counter() - self.start)

        return _Timer()


def train(args: argparse.Namespace) -> Dict[str, object]:
    """Train on the dataset at ``args.dataset``; write the outputs into ``args.out``; return this rank's result."""
    import horovod
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from .models import build_model

    if args.deterministic_allreduce:
        # Tensor fusion packs whichever gradients are ready in one cycle into one buffer, and the ring (Gloo) or the
        # size-dependent algorithm (MPI) then sums each element in an order that depends on its place in the buffer:
        # with 3 or more ranks the weights would change from run to run. One allreduce per tensor fixes the order.
        os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        tf.config.experimental.set_memory_growth(gpus[hvd.local_rank()], True)
    tf.keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    index = read_index(args.dataset)
    multi = index["task"] == "multi-label"
    train_paths = verified_shards(args.dataset, index, "train")
    val_paths = verified_shards(args.dataset, index, "validation")
    train_data, train_per_rank, sharding = rank_dataset(train_paths, index, "train", hvd.rank(), hvd.size(),
                                                        args.batch_size, args.seed, args.shuffle_buffer)
    val_data, _, _ = rank_dataset(val_paths, index, "validation", hvd.rank(), hvd.size(), args.batch_size, args.seed, 0)

    model = build_model(args.model, index["feature_shape"], int(index["num_classes"]), multi, args.hidden_units)  # type: ignore[arg-type]
    scaled_lr = args.learning_rate * hvd.size()
    # The legacy optimizer: Horovod 0.28.1's warm-up callback adjusts momentum as a variable, which only the legacy
    # optimizers of TF >= 2.11 keep it as.
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(scaled_lr, momentum=args.momentum))
    if multi:
        loss, metrics = "binary_crossentropy", [tf.keras.metrics.BinaryAccuracy(name="accuracy")]
    else:
        loss, metrics = "sparse_categorical_crossentropy", ["accuracy"]
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics)

    timer = EpochTimer()
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs,
                                                 steps_per_epoch=-(-train_per_rank // args.batch_size), verbose=0),
        timer.callback(),
    ]
    if model.non_trainable_weights:
        callbacks.insert(2, average_statistics_callback())
    if args.fail_rank >= 0:
        callbacks.append(EpochFailure(args.fail_rank, args.fail_epoch, args.fail_kill).callback(hvd.rank()))
    if hvd.rank() == 0:
        os.makedirs(os.path.join(args.out, "checkpoints"), exist_ok=True)
        callbacks += [
            tf.keras.callbacks.ModelCheckpoint(os.path.join(args.out, "checkpoints", "epoch-{epoch:03d}.weights.h5"),
                                               save_weights_only=True),
            tf.keras.callbacks.TensorBoard(os.path.join(args.out, "tensorboard"), profile_batch=0),
            tf.keras.callbacks.CSVLogger(os.path.join(args.out, "history.csv")),
        ]
    history = model.fit(train_data, validation_data=val_data, epochs=args.epochs, callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)

    result: Dict[str, object] = {
        "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "hostname": socket.gethostname(),
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "weights_sha256": weights_sha256(model.get_weights()),
        "epoch_seconds": timer.seconds,
        "first_step_unix": timer.first_step_unix,
        "train_records_per_rank": train_per_rank,
        "input_sharding": sharding,
        "tensorflow": tf.__version__, "horovod": horovod.__version__,
        "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
    }
    if hvd.rank() == 0:
        # an uncompiled copy: the saved model must not depend on Horovod's optimizer wrapper to load
        plain = tf.keras.models.clone_model(model)
        plain.set_weights(model.get_weights())
        plain.save(os.path.join(args.out, "model.keras"))
        final = {key: float(values[-1]) for key, values in history.history.items()}
        write_json(os.path.join(args.out, "metrics.json"), {"final": final, "epochs": args.epochs,
                                                            "epoch_seconds": timer.seconds})
    return result


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.train --dataset DIR --out DIR [hyperparameters]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", required=True, help="prepared dataset directory (with index.json)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--hidden-units", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="per rank; scaled by the number of ranks")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--shuffle-buffer", type=int, default=10000, help="records in each rank's shuffle buffer")
    parser.add_argument("--deterministic-allreduce", action="store_true",
                        help="allreduce each tensor on its own (no tensor fusion): reproducible sums with 3+ ranks")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow intra- and inter-op threads per rank")
    parser.add_argument("--fail-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--fail-epoch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--fail-kill", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    result = train(args)
    write_json(os.path.join(args.out, "rank-%d.json" % result["rank"]), result)


if __name__ == "__main__":
    main()
