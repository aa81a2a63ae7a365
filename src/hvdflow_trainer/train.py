"""Data-parallel training with Horovod's Keras API on a prepared dataset, deterministic and resumable.

Follows Horovod's Keras recipe in order: init, one GPU per rank, learning rate scaled by the number of ranks,
distributed optimizer, broadcast / metric-average / warm-up callbacks, checkpoints and logs on rank 0 only, and
every rank reading its own equal share of the shards. Every rank restores the newest sound checkpoint of the same run
(:mod:`.checkpoints`); training is one ``fit`` per epoch on that epoch's data, whose order is a pure function of
(seed, epoch, ranks, rank), so a run resumed after any step ends with the weights of an uninterrupted one. A stop
signal ends the run after a checkpoint with status :data:`hvdflow_runstate.STOPPED_EXIT` (:mod:`.run_control`).
Each rank writes ``rank-<r>.json`` (placement, versions and the sha256 of its final weights); rank 0 writes the model,
``history.csv``, TensorBoard logs and ``metrics.json``.

With ``--strategy neighbour`` the optimizer is not Horovod's: each rank steps on its own gradient and then, in the
same compiled step, averages its model with its neighbours' (:mod:`.neighbours`); every rank checkpoints its own
state, and the ranks' models are averaged once at the end. Either way each epoch's history row has the consensus
distance and the bytes a rank sent per step.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from typing import Dict, List, Optional

from hvdflow_index import read_index, verified_shards, write_json
from hvdflow_runstate import STOPPED_EXIT, STOPPED_LINE_END
from hvdflow_runstate import position as describe
from hvdflow_wire.rank import RankResult

from .elastic import elastic_fit
from .input_plan import plan_input
from .machine import cpu_facts, gpu_facts, numerics, nvidia_driver
from .neighbours import TOPOLOGIES, NeighbourAveraging, average_once, communication_callback
from .records import parse_fn
from .run_control import Position, StopFlag, StopRequested, run_control_callbacks


def weights_sha256(weights: list) -> str:  # type: ignore[type-arg]
    """sha256 over the bytes of a model's weight arrays, in order."""
    import hashlib

    sha = hashlib.sha256()
    for array in weights:
        sha.update(array.tobytes())
    return sha.hexdigest()


def epoch_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of one epoch: a pure function of the run's seed and the epoch number."""
    return (seed * 1000003 + epoch) % (2 ** 31 - 1)


def label_sorted_positions(paths: List[str], rank: int, size: int) -> List[int]:
    """The positions (in the split's record order) of this rank's records when the split is dealt out sorted by label.

    The records are sorted by their first label (stable, so ties keep the split's order) and rank r takes the r-th
    of ``size`` equal blocks: each rank sees few classes (non-IID data, as when each site holds its own). Reads the
    split's labels once.
    """
    import numpy as np
    import tensorflow as tf

    features = {"y": tf.io.VarLenFeature(tf.int64)}
    labels = [int(first[0]) if len(first) else -1 for first in
              tf.data.TFRecordDataset(paths).map(
                  lambda r: tf.sparse.to_dense(tf.io.parse_single_example(r, features)["y"])).as_numpy_iterator()]
    per_rank = len(labels) // size
    if per_rank == 0:
        raise ValueError("the split has %d records, fewer than the %d ranks" % (len(labels), size))
    order = np.argsort(np.array(labels), kind="stable")
    return sorted(int(i) for i in order[rank * per_rank:(rank + 1) * per_rank])


def rank_dataset(paths: List[str], index: Dict[str, object], split: str, rank: int, size: int, batch: int,
                 seed: int, shuffle_buffer: int, epoch: int = 0, skip_batches: int = 0,
                 threads: int = 0, positions: Optional[List[int]] = None):  # type: ignore[no-untyped-def]
    """This rank's batches of ``split`` in ``epoch`` (see input_plan): ``(dataset, records per rank, sharding mode)``.

    Every rank gets the same number of records, so all take the same steps. With ``shuffle_buffer`` > 0 the
    records are shuffled with :func:`epoch_seed`, so an epoch's order depends only on (seed, epoch, ranks, rank)
    and a resumed epoch sees exactly the batches it would have seen; ``skip_batches`` drops the ones already done.
    ``threads`` > 0 gives the pipeline a thread pool of that size (the cores the rank owns). ``positions`` (from
    :func:`label_sorted_positions`) are the records this rank reads instead of its planned share.
    """
    import tensorflow as tf

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


class InjectedFailure:
    """Test hook: one rank fails at a given position, after a step or at an epoch's end.

    ``how`` is ``exit`` (status 3), ``exit0`` (status 0, as a rank whose error an elastic wrapper swallowed),
    ``kill`` (SIGKILL) or ``signal`` (SIGUSR1 to itself, as Slurm's warning before a
    time limit: the ranks then stop after that step and rank 0 saves). With a ``marker`` file it fails only once: the
    marker is written first, and a later attempt that finds it trains on.
    """

    HOW = ("exit", "exit0", "kill", "signal")

    def __init__(self, rank: int, epoch: int, step: int, how: str, marker: str) -> None:
        if how not in self.HOW:
            raise ValueError("injected failure: %r is not one of %s" % (how, ", ".join(self.HOW)))
        self.rank, self.epoch, self.step, self.how, self.marker = rank, epoch, step, how, marker

    def fail(self, rank: int, where: str) -> None:
        """Fail now as told (unless the marker says it already did)."""
        if self.marker:
            if os.path.exists(self.marker):
                return
            with open(self.marker, "w") as handle:
                handle.write(where + "\n")
        print("rank %d: failing on purpose (%s) %s" % (rank, self.how, where), flush=True)
        if self.how == "signal":
            # raise(), not kill(): delivered to this (the main) thread before it returns, so the flag is set before
            # this step's agreement. kill() may hand it to one of TensorFlow's threads, and the stop comes a step later
            signal.raise_signal(signal.SIGUSR1)
            return
        if self.how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0 if self.how == "exit0" else 3)

    def callback(self, my_rank: int, position):  # type: ignore[no-untyped-def]
        """A Keras callback (before the run's control callback) that fails when this rank is at the position."""
        import tensorflow as tf

        failure = self

        class _Fail(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
                done = position.step + 1  # the control callback, after this one, counts this step
                if (my_rank == failure.rank and failure.step and position.epoch + 1 == failure.epoch
                        and done == failure.step):
                    failure.fail(my_rank, "at step %d of epoch %d" % (failure.step, failure.epoch))

            def on_epoch_end(self, epoch, logs=None):  # type: ignore[no-untyped-def]
                if my_rank == failure.rank and not failure.step and epoch + 1 == failure.epoch:
                    failure.fail(my_rank, "after epoch %d" % failure.epoch)

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


def resumable_warmup(hvd, initial_lr: float, warmup_epochs: int, steps_per_epoch: int,  # type: ignore[no-untyped-def]
                     size: int):
    """Horovod's learning-rate warm-up, told how many steps of the current epoch were done before a resume.

    Horovod computes the rate from the batch index, which restarts at 0 in a resumed epoch; ``offset`` (set by the
    training loop) adds the steps already done, so every step gets the rate it would have had. The rate rises from
    ``initial_lr / size`` to ``initial_lr`` by Horovod's formula, with ``size`` the rank count the global batch is set
    for (Horovod's own reads ``hvd.size()``, which an elastic run changes).
    """

    class _Warmup(hvd.callbacks.LearningRateWarmupCallback):
        offset = 0

        def on_batch_begin(self, batch, logs=None):  # type: ignore[no-untyped-def]
            super().on_batch_begin(batch + self.offset, logs)

    warmup = _Warmup(initial_lr=initial_lr, warmup_epochs=warmup_epochs, steps_per_epoch=steps_per_epoch, verbose=0)

    def multiplier(epoch: float) -> float:  # Horovod's, with the size fixed
        epoch += 1. / warmup.steps_per_epoch
        return 1. / size * (epoch * (size - 1) / warmup_epochs + 1)

    warmup.multiplier = multiplier
    return warmup


def pick_gpu(gpus: list, local_rank: int):  # type: ignore[type-arg,no-untyped-def]
    """The GPU this rank uses: the only one visible (its launcher narrowed the list to its own), else its local rank's."""
    if len(gpus) == 1:
        return gpus[0]
    if local_rank >= len(gpus):
        raise RuntimeError("local rank %d sees %d GPUs and none of its own: give each rank one GPU"
                           % (local_rank, len(gpus)))
    return gpus[local_rank]


def write_history(path: str, history: List[Dict[str, float]]) -> None:
    """``history.csv`` as Keras' CSVLogger writes it: ``epoch`` (from 0), then the logged values in name order."""
    import csv

    keys = sorted({key for row in history for key in row})
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch"] + keys)
        for epoch, row in enumerate(history):
            writer.writerow([epoch] + [row.get(key, "") for key in keys])
    os.replace(tmp, path)


def write_tensorboard(folder: str, history: List[Dict[str, float]], first_epoch: int) -> None:
    """Epoch scalars (``epoch_<metric>``) under ``train/`` and ``validation/``, as Keras' TensorBoard callback names them."""
    import tensorflow as tf

    writers = {"train": tf.summary.create_file_writer(os.path.join(folder, "train")),
               "validation": tf.summary.create_file_writer(os.path.join(folder, "validation"))}
    for epoch in range(first_epoch, len(history)):
        for key, value in history[epoch].items():
            split, name = ("validation", key[4:]) if key.startswith("val_") else ("train", key)
            with writers[split].as_default():
                tf.summary.scalar("epoch_" + name, value, step=epoch)
    for writer in writers.values():
        writer.close()


def train(args: argparse.Namespace, flag: StopFlag) -> RankResult:
    """Train on the dataset at ``args.dataset``; write the outputs into ``args.out``; return this rank's result.

    Resumes from the newest sound checkpoint of the same run in ``args.checkpoint_dir``; raises StopRequested when
    the ranks stopped on a signal (``flag`` set; rank 0 saved a checkpoint first).
    """
    import horovod
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from .checkpoints import RunCheckpoints
    from .models import build_model, sgd

    if args.deterministic_allreduce:
        # Tensor fusion packs whichever gradients are ready in one cycle into one buffer, and the ring (Gloo) or the
        # size-dependent algorithm (MPI) then sums each element in an order that depends on its place in the buffer:
        # with 3 or more ranks the weights would change from run to run. One allreduce per tensor fixes the order.
        os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu = pick_gpu(gpus, hvd.local_rank())
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    # each op spreads over the rank's cores; ops run one after another (more inter-op threads would oversubscribe)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    index = read_index(args.dataset)
    multi = index["task"] == "multi-label"
    train_paths = verified_shards(args.dataset, index, "train")
    val_paths = verified_shards(args.dataset, index, "validation")
    # the rank count the global batch and the learning rate are set for: an elastic run keeps both when it changes
    nominal = args.elastic_ranks or hvd.size()
    global_batch = args.batch_size * nominal

    class Layout:
        """What depends on the rank count: this rank's data, batch and steps (rebuilt when an elastic run resets)."""

        def __init__(self) -> None:
            self.rank, self.size = hvd.rank(), hvd.size()
            if global_batch % self.size:
                raise ValueError("the global batch %d (batch_size x ranks) does not divide among %d ranks"
                                 % (global_batch, self.size))
            self.batch = global_batch // self.size
            self.positions = (label_sorted_positions(train_paths, self.rank, self.size)
                              if args.shard_order == "by_label" else None)
            _, self.train_per_rank, self.sharding = self.epoch_data(0)
            self.steps_per_epoch = -(-self.train_per_rank // self.batch)
            self.val_data, _, _ = rank_dataset(val_paths, index, "validation", self.rank, self.size, self.batch,
                                               args.seed, 0, threads=args.threads)

        def epoch_data(self, epoch: int, skip: int = 0):  # type: ignore[no-untyped-def]
            return rank_dataset(train_paths, index, "train", self.rank, self.size, self.batch, args.seed,
                                args.shuffle_buffer, epoch, skip, args.threads, self.positions)

    model = build_model(args.model, index["feature_shape"], int(index["num_classes"]), multi, args.hidden_units)  # type: ignore[arg-type]
    scaled_lr = args.learning_rate * nominal
    # Neighbour training steps on each rank's own gradient, then averages models (.neighbours); the same scaled rate
    # makes it the allreduce step on a complete graph.
    optimizer = sgd(scaled_lr, args.momentum)
    neighbours = None
    if args.strategy == "neighbour":
        neighbours = NeighbourAveraging(args.topology, hvd.rank(), hvd.size())
        optimizer = neighbours.wrap(optimizer, model)
    else:
        optimizer = hvd.DistributedOptimizer(optimizer)
    if multi:
        loss, metrics = "binary_crossentropy", [tf.keras.metrics.BinaryAccuracy(name="accuracy")]
    else:
        loss, metrics = "sparse_categorical_crossentropy", ["accuracy"]
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics)

    with open(args.identity) as handle:
        identity = json.load(handle)

    def barrier() -> None:
        hvd_tf.allreduce(tf.constant(0, tf.int32), op=hvd_tf.Max, name="hvdflow_rank_checkpoints")

    # neighbour training: the ranks' weights and momentum differ, so every rank saves and restores its own
    checkpoints = RunCheckpoints(args.checkpoint_dir, identity, args.keep_checkpoints, model, optimizer,
                                 hvd.rank(), hvd.size(), barrier if neighbours is not None else None)
    resumed = checkpoints.restore()  # every rank restores the same checkpoint
    saved = dict(resumed["state"]) if resumed else {}  # type: ignore[arg-type]
    history: List[Dict[str, float]] = list(saved.get("history", []))  # type: ignore[arg-type]
    position = Position(int(resumed["epoch"]), int(resumed["step"])) if resumed else Position(0, 0)  # type: ignore[arg-type]
    start = (position.epoch, position.step)
    if hvd.rank() == 0:
        print("hvdflow: %s" % ("resuming from checkpoint %s at %s" % (resumed["name"], describe(resumed))
                               if resumed else "starting from scratch"), flush=True)
    timer = EpochTimer()

    def fit_epochs(layout: Layout, position: Position, history: List[Dict[str, float]],
                   carried_sums: Optional[List[List[float]]], committed) -> None:  # type: ignore[no-untyped-def]
        """Train from ``position`` to the last epoch with ``layout``'s ranks; ``committed()`` after each epoch."""
        warmup = resumable_warmup(hvd, scaled_lr, args.warmup_epochs, layout.steps_per_epoch, nominal)
        first, control = run_control_callbacks(model, flag, layout.rank, checkpoints, position,
                                               layout.steps_per_epoch, args.epochs, args.checkpoint_every, history,
                                               carried_sums)
        if neighbours is not None:
            callbacks = [first, hvd.callbacks.MetricAverageCallback(), warmup, timer.callback()]
        else:
            # an elastic run's state is broadcast by Horovod's sync before this function runs
            callbacks = [first] + ([] if args.elastic_ranks else [hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
            callbacks += [hvd.callbacks.MetricAverageCallback()]
            if model.non_trainable_weights:
                callbacks.append(average_statistics_callback())
            callbacks += [warmup, timer.callback()]
        callbacks.append(communication_callback(model, neighbours, layout.size))
        if args.fail_rank >= 0:
            marker = os.path.join(args.checkpoint_dir, ".injected-failure") if args.fail_once else ""
            callbacks.append(InjectedFailure(args.fail_rank, args.fail_epoch, args.fail_step, args.fail_how,
                                             marker).callback(layout.rank, position))
        callbacks.append(control)
        # one fit per epoch: each epoch's data is its own (epoch-seeded) dataset, and a resumed epoch skips what was
        # done
        while position.epoch < args.epochs:
            skip = position.step
            warmup.offset = skip
            model.fit(layout.epoch_data(position.epoch, skip)[0], validation_data=layout.val_data,
                      initial_epoch=position.epoch, epochs=position.epoch + 1, callbacks=callbacks, verbose=0)
            committed(position, history)

    if neighbours is not None:
        # Horovod's broadcast runs after the first step and would undo the other ranks' own steps: the start is
        # broadcast here instead (a resumed rank keeps its own restored state)
        if not resumed:
            hvd_tf.broadcast_variables(model.variables, root_rank=0)
    if args.elastic_ranks:
        layout, position, history = elastic_fit(hvd, hvd_tf, model, optimizer, checkpoints, Layout, fit_epochs,
                                                position, history, saved.get("metric_sums"), args.membership)
    else:
        layout = Layout()
        fit_epochs(layout, position, history, saved.get("metric_sums"), lambda position, history: None)  # type: ignore[arg-type]
    if position.epoch < args.epochs:  # Horovod's elastic wrapper returns quietly from errors it does not know
        raise RuntimeError("training returned after %d of %d epochs" % (position.epoch, args.epochs))
    train_per_rank, steps_per_epoch, sharding = layout.train_per_rank, layout.steps_per_epoch, layout.sharding
    if neighbours is not None:
        average_once(model.weights)  # one model for the run: the ranks' average, in a fixed order (no fusion)

    result = RankResult(
        rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
        cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(), hostname=socket.gethostname(),
        controller="mpi" if hvd.mpi_enabled() else "gloo",
        strategy=args.strategy, topology=args.topology if neighbours is not None else None,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cpus=sorted(os.sched_getaffinity(0)), threads=args.threads,
        elastic_worker=os.environ.get("HVDFLOW_ELASTIC_WORKER"), horovod_hostname=os.environ.get("HOROVOD_HOSTNAME"),
        machine={"cpu": cpu_facts(), "gpus": gpu_facts(tf, tf.config.get_visible_devices("GPU")),
                 "nvidia_driver": nvidia_driver()},
        numerics=numerics(tf, args.deterministic_allreduce),
        weights_sha256=weights_sha256(model.get_weights()),
        epochs_done=position.epoch,
        resumed_from={"epoch": start[0], "step": start[1]},
        epoch_seconds=timer.seconds,
        first_step_unix=timer.first_step_unix,
        train_records_per_rank=train_per_rank,
        steps_per_epoch=steps_per_epoch,
        input_sharding=sharding,
        tensorflow=tf.__version__, horovod=horovod.__version__,
        python="%d.%d.%d" % tuple(sys.version_info[:3]),
    )
    if hvd.rank() == 0:
        # an uncompiled copy: the saved model must not depend on Horovod's optimizer wrapper to load
        plain = tf.keras.models.clone_model(model)
        plain.set_weights(model.get_weights())
        plain.save(os.path.join(args.out, "model.keras"))
        write_history(os.path.join(args.out, "history.csv"), history)
        write_tensorboard(os.path.join(args.out, "tensorboard"), history, 0)
        write_json(os.path.join(args.out, "metrics.json"), {"final": history[-1], "epochs": args.epochs,
                                                            "epoch_seconds": timer.seconds,
                                                            "steps_per_epoch": steps_per_epoch})
        checkpoints.finish()
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
    parser.add_argument("--strategy", choices=("allreduce", "neighbour"), default="allreduce",
                        help="allreduce the gradients, or average models with neighbours after every step")
    parser.add_argument("--topology", choices=TOPOLOGIES, default="ring", help="the neighbours (neighbour strategy)")
    parser.add_argument("--shard-order", choices=("shuffled", "by_label"), default="shuffled",
                        help="deal the training split out as planned (IID), or sorted by label (non-IID)")
    parser.add_argument("--threads", type=int, default=1,
                        help="TensorFlow's intra-op and tf.data's threads per rank: the cores it owns (the launcher says)")
    parser.add_argument("--checkpoint-dir", required=True, help="the run's checkpoint folder (kept across attempts)")
    parser.add_argument("--identity", required=True, help="JSON file: the run's identity (hvdflow_runstate.run_identity)")
    parser.add_argument("--elastic-ranks", type=int, default=0,
                        help="train under Horovod's elastic API; the rank count the global batch and rate are set for")
    parser.add_argument("--membership", default="", help="elastic: the JSON-lines file rank 0 appends each membership to")
    parser.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints")
    parser.add_argument("--keep-checkpoints", type=int, default=2, help="checkpoints kept")
    parser.add_argument("--fail-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--fail-epoch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--fail-step", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--fail-how", default="exit", help=argparse.SUPPRESS)
    parser.add_argument("--fail-once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    flag = StopFlag()
    flag.install()  # before TensorFlow loads (seconds): a signal then is kept, not lost
    try:
        result = train(args, flag)
    except StopRequested as stop:
        print("hvdflow: %s%s" % (stop, STOPPED_LINE_END), flush=True)
        sys.exit(STOPPED_EXIT)
    result.write(os.path.join(args.out, "rank-%d.json" % result.rank))


if __name__ == "__main__":
    main()
