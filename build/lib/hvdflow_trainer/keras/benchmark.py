"""The benchmark's measurements with TensorFlow and Horovod (see :mod:`hvdflow_trainer.benchmark`): a model's training
throughput on synthetic data, Horovod's allreduce bandwidth, and the raw TCP bandwidth between two ranks."""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from hvdflow_wire.benchmark import AllreduceTime, BenchmarkResult

from ..measurement import (
    ALLREDUCE,
    SHAPES,
    allreduce_time,
    iterations_for,
    long_enough_window,
    rank_facts,
    ranks_start,
    tcp_bandwidth,
)
from ..options import BenchmarkOptions
from ..user_code import user_model_of


def _timed_model(args: BenchmarkOptions, hvd, hvd_tf, tf) -> Dict[str, object]:  # type: ignore[no-untyped-def]
    """Train ``args.kind`` on one repeated synthetic batch; the end of the first step, and the throughput over the
    steps after the warm-up (or over a longer ``fit``, where those took less than ``args.min_seconds``)."""
    from .models import build_model, loss_and_metrics, sgd

    user = user_model_of(args)
    if user is not None:  # a user's model, on synthetic data of the shape and classes the config gives
        shape, classes, multi = tuple(args.input_shape), int(args.num_classes), bool(args.multi_label)
    else:
        shape, classes, multi = SHAPES[args.kind]
    rng = __import__("numpy").random.default_rng(args.seed + hvd.rank())
    x = rng.standard_normal((args.batch_size,) + shape).astype("float32")
    if multi:
        y = (rng.random((args.batch_size, classes)) < 0.2).astype("float32")
        loss = "binary_crossentropy"
    else:
        y = rng.integers(0, classes, size=(args.batch_size,)).astype("int64")
        loss = "sparse_categorical_crossentropy"
    model = build_model(args.kind, shape, classes, multi, args.hidden_units, user)
    optimizer = hvd.DistributedOptimizer(sgd(0.01 * hvd.size(), 0.9))
    model.compile(optimizer=optimizer, loss=loss_and_metrics(user, classes, multi)[0] if user else loss)
    ends: List[float] = []

    class StepTimes(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
            ends.append(time.time())

    def fit(steps: int, *callbacks) -> None:  # type: ignore[no-untyped-def]
        ends.clear()
        model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(steps), epochs=1, steps_per_epoch=steps, verbose=0,
                  callbacks=[*callbacks, StepTimes()])

    fit(args.warmup_steps + args.steps, hvd.callbacks.BroadcastGlobalVariablesCallback(0))
    first_step_end = ends[0]

    def longer_pass(steps: int) -> float:
        fit(steps + 1)
        return ends[-1] - ends[0]

    timed, measured = long_enough_window(
        args.steps, ends[-1] - ends[args.warmup_steps - 1], args.min_seconds,
        lambda n: hvd_tf.broadcast_object(n, root_rank=0, name="timed_steps"), longer_pass)
    return {"first_step_end": first_step_end, "measured_seconds": measured, "steps": timed,
            "samples_per_second": timed * args.batch_size * hvd.size() / measured,
            "parameters": int(model.count_params())}


def _allreduce_sweep(args: BenchmarkOptions, hvd, tf) -> List[AllreduceTime]:  # type: ignore[no-untyped-def]
    """Time Horovod's allreduce (sum) of float32 tensors of each size in ``args.sizes_kib`` (``hvd``:
    ``horovod.tensorflow``); each size's time is the slowest rank's mean."""
    rows = []
    for kib in args.sizes_kib:
        size = kib * 1024
        tensor = tf.ones([size // 4], dtype=tf.float32)
        for _ in range(2):  # warm-up: Horovod negotiates a new tensor name and shape once
            hvd.allreduce(tensor, op=hvd.Sum, name="bench%d" % kib).numpy()
        iterations = iterations_for(size)
        start = time.perf_counter()
        for _ in range(iterations):
            hvd.allreduce(tensor, op=hvd.Sum, name="bench%d" % kib).numpy()
        seconds = (time.perf_counter() - start) / iterations
        seconds = float(hvd.allreduce(tf.constant(seconds), op=hvd.Max, name="time%d" % kib).numpy())
        rows.append(allreduce_time(size, seconds, iterations, hvd.size()))
    return rows


def run(args: BenchmarkOptions) -> Tuple[int, Optional[BenchmarkResult]]:
    """Measure as ``args`` say; this rank and, on rank 0, the result (None on the other ranks)."""
    started = time.perf_counter()
    import horovod
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    imported_at = time.time()
    import_seconds = time.perf_counter() - started
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        gpu = gpus[hvd.local_rank() % len(gpus)]
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.keras.utils.set_random_seed(args.seed)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    measured: Dict[str, Any] = {}
    if args.kind == ALLREDUCE:
        measured["allreduce"] = _allreduce_sweep(args, hvd_tf, tf)
        measured["tcp"] = tcp_bandwidth(hvd.rank(), hvd.size(),
                                        lambda obj, root: hvd_tf.broadcast_object(obj, root_rank=root, name="tcp_address"),
                                        lambda obj: hvd_tf.allgather_object(obj, name="tcp_seconds"))
    else:
        measured.update(_timed_model(args, hvd, hvd_tf, tf), batch_size=args.batch_size,
                        warmup_steps=args.warmup_steps)
        first = float(measured.pop("first_step_end")) - args.launched
        measured["seconds_to_first_step"] = max(hvd_tf.allgather_object(first, name="first_step"))
    facts = hvd_tf.allgather_object(rank_facts(import_seconds, imported_at - args.launched), name="rank_facts")
    if hvd.rank() != 0:
        return hvd.rank(), None
    return 0, BenchmarkResult(rank=0, kind=args.kind, ranks=hvd.size(), threads=args.threads, gpus=len(gpus),
                              python=sys.version.split()[0], horovod=horovod.__version__, tensorflow=tf.__version__,
                              **ranks_start(facts), **measured)


