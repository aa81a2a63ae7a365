"""Data-parallel training with Horovod's Keras API: a rank's set-up, the compiled model, one ``fit`` per epoch.

Follows Horovod's Keras recipe in order: init, one GPU per rank, learning rate scaled by the number of ranks,
distributed optimizer, broadcast / metric-average / warm-up callbacks, checkpoints and logs on rank 0 only, and
every rank reading its own equal share of the shards. Every rank restores the newest sound checkpoint of the same run
(:mod:`.checkpoints`); training is one ``fit`` per epoch on that epoch's data, whose order is a pure function of
(seed, epoch, ranks, rank), so a run resumed after any step ends with the weights of an uninterrupted one. A stop
signal ends the run after a checkpoint (:mod:`.callbacks`, :mod:`hvdflow_trainer.run_control`).

With ``--strategy neighbour`` the optimizer is not Horovod's: each rank steps on its own gradient and then, in the
same compiled step, averages its model with its neighbours' (:mod:`.neighbours`); every rank checkpoints its own
state, and the ranks' models are averaged once at the end. Either way each epoch's history row has the consensus
distance and the bytes a rank sent per step.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Callable, Dict, List, Optional, Tuple

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import tensorflow as tf

from hvdflow_index import read_index, verified_shards
from hvdflow_runstate import position as describe

from ..elastic import ElasticApi, train_all_epochs
from ..faults import injected_failures
from ..input_plan import label_sorted_positions
from ..options import TrainOptions
from ..placement import pick_gpu
from ..run_control import Position, StopFlag
from ..step_times import StepClock
from ..user_code import user_model_of
from .callbacks import AverageStatistics, EpochTimer, InjectedFailureCallback, ResumableWarmup, run_control_callbacks
from .checkpoints import RunCheckpoints, floating_non_trainable
from .data import first_labels, rank_dataset, slowed
from .models import build_model, loss_and_metrics, sgd
from .neighbours import Communication, NeighbourAveraging, average_once
from .outputs import write_rank_result, write_run_outputs
from .randomness import use_resumable_generators
from .step_times import StepTimes


def set_up_rank(args: TrainOptions) -> None:
    """Horovod's init, this rank's GPU, the seed, resumable random layers, deterministic ops and the rank's
    threads."""
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
    use_resumable_generators()  # random layers built from here on checkpoint their generators' state
    if not args.no_op_determinism:
        tf.config.experimental.enable_op_determinism()
    # each op spreads over the rank's cores; ops run one after another (more inter-op threads would oversubscribe)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


class Dataset:
    """The prepared dataset at ``folder``: its index and its verified training and validation shards."""

    def __init__(self, folder: str) -> None:
        self.index = read_index(folder)
        self.multi = self.index["task"] == "multi-label"
        self.train_paths = verified_shards(folder, self.index, "train")
        self.val_paths = verified_shards(folder, self.index, "validation")


class Layout:
    """What depends on the rank count: this rank's data, batch and steps (built again when an elastic run resets)."""

    def __init__(self, args: TrainOptions, data: Dataset, global_batch: int) -> None:
        self.args, self.data = args, data
        self.rank, self.size = hvd.rank(), hvd.size()
        if global_batch % self.size:
            raise ValueError("the global batch %d (batch_size x ranks) does not divide among %d ranks"
                             % (global_batch, self.size))
        self.batch = global_batch // self.size
        self.positions = (label_sorted_positions(first_labels(data.train_paths), self.rank, self.size)
                          if args.shard_order == "by_label" else None)
        _, self.train_per_rank, self.sharding = self.epoch_data(0)
        self.steps_per_epoch = -(-self.train_per_rank // self.batch)
        self.val_data, _, _ = rank_dataset(data.val_paths, data.index, "validation", self.rank, self.size, self.batch,
                                           args.seed, 0, threads=args.threads)

    def epoch_data(self, epoch: int, skip: int = 0):  # type: ignore[no-untyped-def]
        """``(dataset, records per rank, sharding mode)`` of ``epoch``, less the first ``skip`` batches."""
        args = self.args
        return rank_dataset(self.data.train_paths, self.data.index, "train", self.rank, self.size, self.batch,
                            args.seed, args.shuffle_buffer, epoch, skip, args.threads, self.positions)


def compile_model(args: TrainOptions, data: Dataset, scaled_lr: float):  # type: ignore[no-untyped-def]
    """``(model, optimizer, neighbour averaging or None)``: the model compiled with Horovod's optimizer, or with the
    neighbour strategy's."""
    user = user_model_of(args)
    classes = int(data.index["num_classes"])  # type: ignore[call-overload]
    model = build_model(args.model, data.index["feature_shape"], classes, data.multi, args.hidden_units, user)  # type: ignore[arg-type]
    # Neighbour training steps on each rank's own gradient, then averages models (.neighbours); the same scaled rate
    # makes it the allreduce step on a complete graph.
    optimizer = sgd(scaled_lr, args.momentum)
    neighbours = None
    if args.strategy == "neighbour":
        neighbours = NeighbourAveraging(args.topology, hvd.rank(), hvd.size())
        optimizer = neighbours.wrap(optimizer, model)
    else:
        optimizer = hvd.DistributedOptimizer(optimizer)
    loss, metrics = loss_and_metrics(user, classes, data.multi)
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics)
    return model, optimizer, neighbours


def rank_barrier() -> None:
    """All ranks meet (an allreduce of nothing)."""
    hvd_tf.allreduce(tf.constant(0, tf.int32), op=hvd_tf.Max, name="hvdflow_rank_checkpoints")


def open_checkpoints(args: TrainOptions, model, optimizer, per_rank: bool) -> RunCheckpoints:  # type: ignore[no-untyped-def]
    """The run's checkpoints; ``per_rank`` (neighbour training: the ranks' weights and momentum differ): every rank
    saves and restores its own."""
    with open(args.identity) as handle:
        identity = json.load(handle)
    return RunCheckpoints(args.checkpoint_dir, identity, args.keep_checkpoints, model, optimizer,
                          hvd.rank(), hvd.size(), rank_barrier if per_rank else None, gather_ranks)


def gather_ranks(tensor: tf.Tensor, name: str) -> tf.Tensor:
    """Every rank's ``tensor`` (its first axis of length 1) stacked in rank order (all ranks call it)."""
    return hvd_tf.allgather(tensor, name=name)


def broadcast_start(model) -> None:  # type: ignore[no-untyped-def]
    """Rank 0's model to every rank, before the first step of a run that starts from scratch (the optimizer's
    variables are the same zeros and rates on every rank then).

    Horovod's ``BroadcastGlobalVariablesCallback`` does it after the first step of every ``fit`` it is given to,
    which in a resumed run would overwrite each rank's own BatchNorm statistics with rank 0's where the uninterrupted
    run did so only once; a resumed run needs none (every rank restored the same checkpoint and its own
    statistics)."""
    hvd_tf.broadcast_variables(model.variables, root_rank=0)


def resume(checkpoints: RunCheckpoints
           ) -> Tuple[Optional[Dict[str, object]], Dict[str, object], Position, List[Dict[str, float]]]:
    """Restore the newest sound checkpoint (every rank the same one): ``(its manifest entry or None, its saved state,
    position, history)``."""
    resumed = checkpoints.restore()
    saved = dict(resumed["state"]) if resumed else {}  # type: ignore[arg-type]
    history: List[Dict[str, float]] = list(saved.get("history", []))  # type: ignore[arg-type]
    position = Position(int(resumed["epoch"]), int(resumed["step"])) if resumed else Position(0, 0)  # type: ignore[arg-type]
    if hvd.rank() == 0:
        print("hvdflow: %s" % ("resuming from checkpoint %s at %s" % (resumed["name"], describe(resumed))
                               if resumed else "starting from scratch"), flush=True)
    return resumed, saved, position, history


def no_commit(position: Position, history: List[Dict[str, float]]) -> None:
    """A fixed run commits nothing after an epoch (its checkpoints are the run control's)."""


class FitLoop:
    """One ``fit`` per epoch from a position to the last epoch, with one layout's ranks."""

    def __init__(self, args: TrainOptions, flag: StopFlag, model, checkpoints: RunCheckpoints,  # type: ignore[no-untyped-def]
                 neighbours: Optional[NeighbourAveraging], scaled_lr: float, nominal: int, timer: EpochTimer,
                 step_times: Optional[StepTimes]) -> None:
        self.args, self.flag, self.model, self.checkpoints = args, flag, model, checkpoints
        self.neighbours, self.scaled_lr, self.nominal, self.timer = neighbours, scaled_lr, nominal, timer
        self.step_times = step_times

    def callbacks(self, layout: Layout, position: Position, first, control, warmup) -> list:  # type: ignore[no-untyped-def,type-arg]
        """``fit``'s callbacks, in order: run control's first, Horovod's metric average, the statistics' average
        (before the epoch's validation), the warm-up, the timers, the communication figures, a test's injected
        failure (none unless asked for), run control's last. Rank 0's start is broadcast before ``fit``
        (:func:`broadcast_start`)."""
        callbacks = [first, hvd.callbacks.MetricAverageCallback()]
        if self.neighbours is None and floating_non_trainable(self.model):
            callbacks.append(AverageStatistics(position, layout.steps_per_epoch))
        callbacks += [warmup, self.timer] + ([self.step_times] if self.step_times is not None else [])
        callbacks.append(Communication(self.model, self.neighbours, layout.size))
        callbacks += [InjectedFailureCallback(failure, layout.rank, position) for failure in injected_failures(self.args)]
        callbacks.append(control)
        return callbacks

    def __call__(self, layout: Layout, position: Position, history: List[Dict[str, float]],
                 carried_sums: Optional[List[List[float]]], committed: Callable = no_commit) -> None:  # type: ignore[type-arg]
        """Train from ``position`` to the last epoch with ``layout``'s ranks; ``committed(position, history)`` after
        each epoch."""
        args = self.args
        warmup = ResumableWarmup(self.scaled_lr, args.warmup_epochs, layout.steps_per_epoch, self.nominal)
        first, control = run_control_callbacks(self.model, self.flag, layout.rank, self.checkpoints, position,
                                               layout.steps_per_epoch, args.epochs, args.checkpoint_every, history,
                                               carried_sums)
        callbacks = self.callbacks(layout, position, first, control, warmup)
        # one fit per epoch: each epoch's data is its own (epoch-seeded) dataset, and a resumed epoch skips what was
        # done
        while position.epoch < args.epochs:
            skip = position.step
            warmup.offset = skip
            data = layout.epoch_data(position.epoch, skip)[0]
            self.model.fit(slowed(data, args.slow_input) if args.slow_input else data, validation_data=layout.val_data,
                           initial_epoch=position.epoch, epochs=position.epoch + 1, callbacks=callbacks, verbose=0)
            committed(position, history)


def train(args: TrainOptions, flag: StopFlag) -> None:
    """Train on the dataset at ``args.dataset``; write the outputs and this rank's result into ``args.out``.

    Resumes from the newest sound checkpoint of the same run in ``args.checkpoint_dir``; raises StopRequested when
    the ranks stopped on a signal (``flag`` set; rank 0 saved a checkpoint first).
    """
    set_up_rank(args)
    data = Dataset(args.dataset)
    # the rank count the global batch and the learning rate are set for: an elastic run keeps both when it changes
    nominal = args.elastic_ranks or hvd.size()
    scaled_lr = args.learning_rate * nominal
    model, optimizer, neighbours = compile_model(args, data, scaled_lr)
    checkpoints = open_checkpoints(args, model, optimizer, per_rank=neighbours is not None)
    resumed, saved, position, history = resume(checkpoints)
    start = Position(position.epoch, position.step)
    timer = EpochTimer()
    step_times = None
    if args.usage_seconds > 0:  # measured with the rank's use of its allocation, or not at all
        step_times = StepTimes(StepClock())
        step_times.instrument(model, optimizer, neighbours, hvd.size())
    loop = FitLoop(args, flag, model, checkpoints, neighbours, scaled_lr, nominal, timer, step_times)
    if not resumed and not args.elastic_ranks:  # an elastic run's state is broadcast by Horovod's sync
        broadcast_start(model)
    make_layout = functools.partial(Layout, args, data, args.batch_size * nominal)
    elastic = None
    if args.elastic_ranks:
        elastic = ElasticApi(functools.partial(hvd.elastic.KerasState, model, optimizer), hvd.elastic.run,
                             hvd_tf.allgather_object)
    layout, position, history = train_all_epochs(args.epochs, make_layout, loop, position, history,
                                                 saved.get("metric_sums"), checkpoints, args.membership, elastic)  # type: ignore[arg-type]
    if neighbours is not None:
        average_once(model.weights)  # one model for the run: the ranks' average, in a fixed order (no fusion)
    if hvd.rank() == 0:
        write_run_outputs(args.out, model, history, args.epochs, timer, layout.steps_per_epoch)
        checkpoints.finish()
    write_rank_result(args, model, args.topology if neighbours is not None else None, position, start, timer, layout,
                      step_times.clock.result() if step_times is not None else None)
