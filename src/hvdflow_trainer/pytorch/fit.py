"""Data-parallel training with PyTorch, in Horovod's PyTorch API or PyTorch's own DistributedDataParallel
(:mod:`.comm`): a rank's set-up, the model and optimizer, the resume, and the step loop with the run's guarantees.

Follows the Keras trainer (:mod:`hvdflow_trainer.keras.fit`) step for step, so a PyTorch run gives the same files
and keeps the same promises: the learning rate scaled by the rank count with Horovod's warm-up formula, one GPU per
rank, every rank reading its equal share of the verified shards in an order that is a pure function of (seed, epoch,
ranks, rank) (:mod:`.data`), BatchNorm statistics averaged over the ranks at each epoch's end, full-state
checkpoints under the run's manifest (:mod:`.checkpoints`), a resume from any step that ends with the weights of an
uninterrupted run, and a stop on a signal agreed by all ranks after the same step (rank 0 saves first).

With Horovod's API two more ways to train, as the Keras trainer has them: ``--strategy neighbour`` (no
DistributedOptimizer: each rank steps on its own gradient, then averages its model with its neighbours',
:mod:`.neighbours`; every rank checkpoints its own state; the ranks' models averaged once at the end), and
``--elastic-ranks`` (Horovod's elastic API with torch's state, :mod:`hvdflow_trainer.elastic`: ranks may leave and
join, the global batch and learning rate stay those of the nominal rank count). DistributedDataParallel has neither.

Bit-identical weights on CPU come from torch's deterministic algorithms, a fixed thread count per rank, seeded
generators, and sums in a fixed order (Horovod with tensor fusion off; DDP's Gloo allreduce of fixed buckets).

Keras' SGD keeps the learning rate inside its velocity, so Horovod's warm-up corrects the momentum whenever it changes
the rate; torch's SGD applies the rate after the momentum, which is that corrected update: no correction is needed.
"""

from __future__ import annotations

import functools
import json
import os
import random
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

from hvdflow_index import read_index, verified_shards
from hvdflow_runstate import position as describe
from hvdflow_wire.steps import EpochSteps

from ..elastic import ElasticApi, train_all_epochs
from ..faults import injected_failures, slowed_batches
from ..input_plan import label_sorted_positions
from ..neighbours import allreduce_bytes_per_step
from ..options import TrainOptions
from ..run_control import Position, StopFlag, StopRequested, checkpoint_due, progress_line, stop_reason
from ..step_times import StepClock, timed_input
from ..user_code import user_model_of
from .checkpoints import RunCheckpoints
from .comm import Ranks, horovod_api, join_ranks
from .data import RankBatches, SplitRecords, rank_positions
from .models import Metric, build_model, correct, loss_and_metrics
from .neighbours import NeighbourAveraging, average_once
from .outputs import write_rank_result, write_run_outputs
from .step_hooks import GradientClock

SUMS = ("loss", "right", "answers", "samples")
"""A rank's running sums over an epoch's steps: the sample-weighted loss, right answers, answers, samples; then the
sample-weighted values of the user's metrics, in name order."""


def local_gpu() -> Optional[int]:
    """This rank's GPU (by its local rank, or the only one its launcher left visible), or None on a CPU machine."""
    if not torch.cuda.is_available():
        return None
    count, local_rank = torch.cuda.device_count(), int(os.environ.get("HOROVOD_LOCAL_RANK", "0"))
    if count == 1:
        return 0
    if local_rank >= count:
        raise RuntimeError("local rank %d sees %d GPUs and none of its own: give each rank one GPU" % (local_rank, count))
    return local_rank


def set_up_rank(args: TrainOptions) -> Ranks:
    """Threads, determinism, this rank's GPU, the ranks' group, and the seeds."""
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    if not args.no_op_determinism:
        torch.use_deterministic_algorithms(True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS' deterministic mode (GPU)
    if args.deterministic_allreduce:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"  # one allreduce per tensor: a fixed order of sums (Keras' reason)
    gpu = local_gpu()
    if gpu is not None:
        torch.cuda.set_device(gpu)
    ranks = join_ranks(args.distributed, gpu)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    random.seed(args.seed)
    return ranks


class Layout:
    """The dataset and this rank's share of it: the training batches in each epoch's order, the validation batches
    (built again when an elastic run changes its ranks). ``global_batch``: the batch of all ranks together (default:
    ``--batch-size`` per rank)."""

    def __init__(self, args: TrainOptions, ranks: Ranks, global_batch: Optional[int] = None) -> None:
        self.index = read_index(args.dataset)
        self.multi = self.index["task"] == "multi-label"
        train = SplitRecords(verified_shards(args.dataset, self.index, "train"), self.index)
        val = SplitRecords(verified_shards(args.dataset, self.index, "validation"), self.index)
        counts = {split: [int(s["records"]) for s in self.index["splits"][split]["shards"]]  # type: ignore[index]
                  for split in ("train", "validation")}
        global_batch = global_batch or args.batch_size * ranks.size
        if global_batch % ranks.size:
            raise ValueError("the global batch %d (batch_size x ranks) does not divide among %d ranks"
                             % (global_batch, ranks.size))
        self.rank, self.size, self.batch = ranks.rank, ranks.size, global_batch // ranks.size
        by_label = (label_sorted_positions(train.first_labels(), ranks.rank, ranks.size)
                    if args.shard_order == "by_label" else None)
        try:
            mine, self.sharding = rank_positions(train, counts["train"], ranks.rank, ranks.size, by_label)
            val_mine, _ = rank_positions(val, counts["validation"], ranks.rank, ranks.size)
        except ValueError as exc:
            raise ValueError("%s: %s" % (args.dataset, exc)) from None
        self.train = RankBatches(train, mine, self.batch, args.seed, args.shuffle_buffer > 0)
        self.val = RankBatches(val, val_mine, self.batch, args.seed, False)
        self.train_per_rank, self.steps_per_epoch = len(mine), self.train.steps


def add_batch(sums: List[float], loss: float, logits: torch.Tensor, y: torch.Tensor, multi: bool,
              metrics: Dict[str, Metric]) -> None:
    """A batch's loss (its mean), answers and metrics added to the running ``sums`` (:data:`SUMS`)."""
    right, answers = correct(logits, y, multi)
    samples = logits.shape[0]
    sums[0] += loss * samples
    sums[1] += right
    sums[2] += answers
    sums[3] += samples
    for i, metric in enumerate(metrics.values()):
        sums[len(SUMS) + i] += float(metric(logits, y)) * samples


def epoch_row(sums: List[float], metrics: Dict[str, Metric], ranks: Ranks, prefix: str = "") -> Dict[str, float]:
    """The epoch's loss, accuracy and metrics from every rank's ``sums``, averaged over the ranks (every rank calls
    it); ``prefix``: ``val_`` for the validation's."""
    samples = max(sums[3], 1)
    means = ranks.mean_of([sums[0] / samples, sums[1] / max(sums[2], 1)]
                          + [s / samples for s in sums[len(SUMS):]])
    names = ["loss", "accuracy"] + list(metrics)
    return {prefix + name: value for name, value in zip(names, means)}


def validation_metrics(net: torch.nn.Module, layout: Layout, loss_of: Metric, metrics: Dict[str, Metric],
                       device: torch.device, ranks: Ranks) -> Dict[str, float]:
    """``val_loss``, ``val_accuracy`` and each ``val_<metric>`` of ``net`` (logits) on this rank's validation share,
    averaged over the ranks (every rank calls it)."""
    net.eval()
    sums = [0.0] * (len(SUMS) + len(metrics))
    with torch.no_grad():
        for x, y in layout.val.epoch(0):
            x, y = x.to(device), y.to(device)
            logits = net(x)
            add_batch(sums, float(loss_of(logits, y).item()), logits, y, layout.multi, metrics)
    net.train()
    return epoch_row(sums, metrics, ranks, "val_")


def average_buffers(model: torch.nn.Module, ranks: Ranks) -> None:
    """BatchNorm's running statistics (the floating buffers) averaged over the ranks, as the Keras trainer does (every
    rank calls it)."""
    with torch.no_grad():
        for buffer in model.buffers():
            if buffer.is_floating_point():
                buffer.copy_(ranks.allreduce_mean(buffer.double()).reshape(buffer.shape).to(buffer))


def read_identity(args: TrainOptions) -> Dict[str, object]:
    """The run's identity (the launcher's ``--identity`` file): whose checkpoints this run may resume."""
    with open(args.identity) as handle:
        return dict(json.load(handle))


def warmup_rate(scaled_lr: float, warmup_epochs: int, size: int, epoch: int, step: int, steps_per_epoch: int) -> float:
    """The learning rate of step ``step`` (from 0) of epoch ``epoch``: Horovod's warm-up from ``scaled_lr / size`` to
    ``scaled_lr`` over ``warmup_epochs`` (its Keras callback's formula), then ``scaled_lr``."""
    if epoch >= warmup_epochs:
        return scaled_lr
    progress = epoch + (step + 1.0) / steps_per_epoch
    return scaled_lr / size * (progress * (size - 1) / warmup_epochs + 1)


def no_commit(position: Position, history: List[Dict[str, float]]) -> None:
    """A fixed run commits nothing after an epoch (its checkpoints are the run control's)."""


class StepLoop:
    """The epochs from a position to the last with one layout's ranks, with the run control after every step and at
    every epoch's end. ``nominal``: the rank count the learning rate is scaled for; ``neighbours``: the neighbour
    strategy's exchange after every step (None: the optimizer averages the gradients)."""

    def __init__(self, args: TrainOptions, flag: StopFlag, ranks: Ranks, model: torch.nn.Module,
                 net: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoints: RunCheckpoints,
                 device: torch.device, nominal: int, neighbours: Optional[NeighbourAveraging],
                 loss: Metric, metrics: Dict[str, Metric]) -> None:
        """``loss`` and ``metrics``: what trains the model and what is logged beside the loss and accuracy."""
        self.args, self.flag, self.ranks, self.neighbours = args, flag, ranks, neighbours
        self.loss, self.metrics = loss, metrics
        self.model, self.net, self.optimizer, self.checkpoints, self.device = model, net, optimizer, checkpoints, device
        self.nominal, self.scaled_lr = nominal, args.learning_rate * nominal
        self.failures = injected_failures(args)
        self.seconds: List[float] = []
        self.first_step_unix: Optional[float] = None
        self.layout: Layout
        # where each step's time goes, measured with the rank's use of its allocation or not at all: the gradients'
        # hooks say when this rank's last gradient was ready; what backward took after it was the wait for DDP's
        # last buckets
        self.clock = StepClock() if args.usage_seconds > 0 else None
        self.gradients = GradientClock(model) if self.clock is not None else None

    def step_times(self) -> Optional[List[EpochSteps]]:
        """Where this rank's steps spent their time, per epoch (None: not measured)."""
        return self.clock.result() if self.clock is not None else None

    def sent_bytes_per_step(self) -> float:
        """What a rank sent per step this epoch: one model per neighbour, or the ring allreduce's share of the
        gradients."""
        if self.neighbours is not None:
            return self.neighbours.epoch_bytes_per_step()
        gradient_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad)
        return float(allreduce_bytes_per_step(self.layout.size, gradient_bytes))

    def save(self, position: Position, history: List[Dict[str, float]], reason: str,
             sums: Optional[List[List[float]]] = None) -> None:
        """A checkpoint at ``position`` (every rank calls it)."""
        state: Dict[str, object] = {"history": history}
        if sums is not None:
            state["metric_sums"] = sums
        if self.flag.unix is not None:
            state["signal_unix"] = self.flag.unix
        self.checkpoints.save(position.epoch, position.step, self.layout.steps_per_epoch, state, reason)

    def stop(self, position: Position, history: List[Dict[str, float]], sums: Optional[List[float]]) -> None:
        """Save (with every rank's sums mid-epoch), wait until it is on disk, and raise StopRequested."""
        # every rank's own sums, exactly (an allgather: all ranks call it)
        every = None if sums is None else [list(s) for s in self.ranks.allgather_object(sums)]
        self.save(position, history, stop_reason(self.flag), every)
        self.ranks.barrier()
        raise StopRequested("stopped at epoch %d step %d on %s" % (position.epoch, position.step, stop_reason(self.flag)))

    def train_step(self, x: torch.Tensor, y: torch.Tensor, rate: float, sums: List[float], step: int,
                   waited: float) -> None:
        """One optimizer step (the run's ``step``-th, from 0) at learning rate ``rate``, and the neighbours' exchange
        after it; the batch's loss and answers added to ``sums``; its times (``waited`` for the batch) to the
        clock."""
        begun = time.perf_counter()
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        x, y = x.to(self.device), y.to(self.device)
        self.optimizer.zero_grad()
        logits = self.net(x)
        loss = self.loss(logits, y)
        loss.backward()
        last_gradient = self.gradients.last if self.gradients is not None else begun
        communicating = time.perf_counter() - max(last_gradient, begun)
        communicating += self.ranks.step(self.optimizer)
        if self.neighbours is not None:
            exchange = time.perf_counter()
            self.neighbours.average(step)
            communicating += time.perf_counter() - exchange
        with torch.no_grad():
            add_batch(sums, float(loss.item()), logits.detach(), y, self.layout.multi, self.metrics)
        if self.clock is not None:
            self.clock.add(waited, time.perf_counter() - begun - communicating, communicating)

    def consensus_distance(self) -> float:
        """The ranks' mean L2 distance of their weights from the ranks' average (0 for one model)."""
        # in float64 the sum of the ranks' float32 weights is exact: ranks that hold one model are 0 apart
        mine = torch.cat([t.detach().double().cpu().flatten() for t in self.model.state_dict().values()
                          if t.is_floating_point()])
        mean = self.ranks.allreduce_mean(mine).cpu()
        return self.ranks.mean_of([float(torch.linalg.vector_norm(mine - mean))])[0]

    def __call__(self, layout: Layout, position: Position, history: List[Dict[str, float]],
                 carried: Optional[List[List[float]]], committed: Callable = no_commit) -> None:  # type: ignore[type-arg]
        """Train from ``position`` to the last epoch with ``layout``'s ranks; ``committed(position, history)`` after
        each epoch."""
        args, self.layout = self.args, layout
        fresh = [0.0] * (len(SUMS) + len(self.metrics))
        sums = list(carried[self.ranks.rank]) if carried is not None else list(fresh)
        while position.epoch < args.epochs:
            started = time.perf_counter()
            stop_at_epoch_end = False
            waited = [0.0]
            if self.clock is not None:
                self.clock.start_epoch(position.epoch)
            batches = layout.train.epoch(position.epoch, position.step)
            if args.slow_input:
                batches = slowed_batches(batches, args.slow_input)
            for x, y in timed_input(batches, waited):
                if self.first_step_unix is None:
                    self.first_step_unix = time.time()
                rate = warmup_rate(self.scaled_lr, args.warmup_epochs, self.nominal, position.epoch, position.step,
                                   layout.steps_per_epoch)
                self.train_step(x, y, rate, sums, position.epoch * layout.steps_per_epoch + position.step, waited[0])
                for failure in self.failures:
                    failure.after_step(self.ranks.rank, position.epoch, position.step + 1)
                position.step += 1
                if self.ranks.allreduce_max(1 if self.flag.signal else 0):
                    if position.step < layout.steps_per_epoch:
                        self.stop(position, history, sums)
                    stop_at_epoch_end = True
            average_buffers(self.model, self.ranks)
            row = {**epoch_row(sums, self.metrics, self.ranks), "lr": float(self.optimizer.param_groups[0]["lr"]),
                   **validation_metrics(self.net, layout, self.loss, self.metrics, self.device, self.ranks),
                   "consensus_distance": self.consensus_distance(),
                   "sent_bytes_per_step": self.sent_bytes_per_step()}
            row = {key: row[key] for key in sorted(row)}
            seconds = time.perf_counter() - started
            self.seconds.append(seconds)
            history.append(row)
            for failure in self.failures:
                failure.after_epoch(self.ranks.rank, position.epoch)
            position.epoch, position.step = position.epoch + 1, 0
            sums = list(fresh)
            if self.ranks.rank == 0:
                print(progress_line(position.epoch, args.epochs, row, seconds), flush=True)
            if stop_at_epoch_end and position.epoch < args.epochs:
                self.stop(position, history, None)
            if checkpoint_due(position.epoch, args.epochs, args.checkpoint_every):
                self.save(position, history, "epoch end")
            committed(position, history)


def train(args: TrainOptions, flag: StopFlag) -> None:
    """Train on the dataset at ``args.dataset``; write the outputs and this rank's result into ``args.out``.

    Resumes from the newest sound checkpoint of the same run in ``args.checkpoint_dir``; raises StopRequested when
    the ranks stopped on a signal (``flag`` set; rank 0 saved a checkpoint first).
    """
    ranks = set_up_rank(args)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    index = read_index(args.dataset)
    multi = index["task"] == "multi-label"
    user = user_model_of(args)
    model = build_model(args.model, index["feature_shape"], int(index["num_classes"]), multi,  # type: ignore[arg-type,call-overload]
                        args.hidden_units, user).to(device)
    loss, metrics = loss_and_metrics(user, int(index["num_classes"]), multi)  # type: ignore[call-overload]
    # the rank count the global batch and the learning rate are set for: an elastic run keeps both when it changes
    nominal = args.elastic_ranks or ranks.size
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate * nominal, momentum=args.momentum)
    neighbours = None
    if args.strategy == "neighbour":
        net, neighbours = model, NeighbourAveraging(horovod_api(ranks, "strategy neighbour"), model, args.topology,
                                                    ranks.rank, ranks.size)
    else:
        # wrapped first: Horovod's optimizer is a new object over the same parameter groups, with its own state, so
        # the checkpoint is restored into (and saved from) the one that steps
        net, optimizer = ranks.wrap(model, optimizer)
    checkpoints = RunCheckpoints(args.checkpoint_dir, read_identity(args), args.keep_checkpoints, model, optimizer,
                                 ranks.rank, ranks.size, ranks.barrier, ranks.allgather_object,
                                 per_rank=neighbours is not None)
    resumed = checkpoints.restore()
    saved = dict(resumed["state"]) if resumed else {}  # type: ignore[arg-type]
    history: List[Dict[str, float]] = list(saved.get("history", []))  # type: ignore[arg-type]
    position = Position(int(resumed["epoch"]), int(resumed["step"])) if resumed else Position(0, 0)  # type: ignore[arg-type]
    start = Position(position.epoch, position.step)
    if ranks.rank == 0:
        print("hvdflow: %s" % ("resuming from checkpoint %s at %s" % (resumed["name"], describe(resumed))
                               if resumed else "starting from scratch"), flush=True)
    if not resumed and not args.elastic_ranks:  # an elastic run's state is broadcast by Horovod's sync
        ranks.broadcast_start(model, optimizer)
    loop = StepLoop(args, flag, ranks, model, net, optimizer, checkpoints, device, nominal, neighbours, loss, metrics)

    def make_layout() -> Layout:
        ranks.follow_membership()
        return Layout(args, ranks, args.batch_size * nominal)

    elastic = None
    if args.elastic_ranks:
        hvd = horovod_api(ranks, "elastic")
        elastic = ElasticApi(functools.partial(hvd.elastic.TorchState, model, optimizer), hvd.elastic.run,
                             hvd.allgather_object)
    layout, position, history = train_all_epochs(args.epochs, make_layout, loop, position, history,
                                                 saved.get("metric_sums"), checkpoints, args.membership, elastic)  # type: ignore[arg-type]
    if neighbours is not None:
        average_once(neighbours.hvd, model)  # one model for the run: the ranks' average, in a fixed order (no fusion)
    if ranks.rank == 0:
        write_run_outputs(args, model, layout, history, loop.seconds)
        checkpoints.finish()
    write_rank_result(args, ranks, model, position, start, loop, layout,
                      args.topology if neighbours is not None else None, loop.step_times())
    ranks.barrier()
    ranks.shutdown()
