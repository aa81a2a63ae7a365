"""The benchmark's measurements with PyTorch (see :mod:`hvdflow_trainer.benchmark`), in Horovod's PyTorch API or
PyTorch's DistributedDataParallel: a model's training throughput on the same synthetic data the TensorFlow
measurements use, and the allreduce bandwidth of the distributed mode (the raw TCP stream is the TensorFlow sweep's)."""

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
)
from ..options import BenchmarkOptions
from ..user_code import user_model_of


def _timed_model(args: BenchmarkOptions, ranks, torch) -> Dict[str, object]:  # type: ignore[no-untyped-def]
    """Train ``args.kind`` (or the user's module) on one repeated synthetic batch; the end of the first step, and the
    throughput over the steps after the warm-up (or over a longer pass, where those took less than
    ``args.min_seconds``)."""
    import numpy as np

    from .models import build_model, loss_and_metrics

    user = user_model_of(args)
    if user is not None:  # a user's module, on synthetic data of the shape and classes the config gives
        shape, classes, multi = tuple(args.input_shape), int(args.num_classes), bool(args.multi_label)
    else:
        shape, classes, multi = SHAPES[args.kind]
    rng = np.random.default_rng(args.seed + ranks.rank)
    x = torch.from_numpy(rng.standard_normal((args.batch_size,) + shape).astype("float32"))
    if len(shape) == 3:
        x = x.permute(0, 3, 1, 2).contiguous()  # NCHW, as the trainer's batches arrive
    if multi:
        y = torch.from_numpy((rng.random((args.batch_size, classes)) < 0.2).astype("float32"))
    else:
        y = torch.from_numpy(rng.integers(0, classes, size=(args.batch_size,)).astype("int64"))
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    x, y = x.to(device), y.to(device)
    model = build_model(args.kind, shape, classes, multi, args.hidden_units, user).to(device)
    net, optimizer = ranks.wrap(model, torch.optim.SGD(model.parameters(), lr=0.01 * ranks.size, momentum=0.9))
    ranks.broadcast_start(model, optimizer)
    loss_of = loss_and_metrics(user, classes, multi)[0]  # the task's loss, or the user's
    ends: List[float] = []

    def train(steps: int) -> None:
        for _ in range(steps):
            optimizer.zero_grad()
            loss_of(net(x), y).backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            ends.append(time.time())

    train(args.warmup_steps + args.steps)

    def longer_pass(steps: int) -> float:
        train(steps + 1)
        return ends[-1] - ends[-steps - 1]

    timed, measured = long_enough_window(args.steps, ends[-1] - ends[args.warmup_steps - 1], args.min_seconds,
                                         lambda n: ranks.allgather_object(n)[0], longer_pass)
    return {"first_step_end": ends[0], "measured_seconds": measured, "steps": timed,
            "samples_per_second": timed * args.batch_size * ranks.size / measured,
            "parameters": sum(p.numel() for p in model.parameters())}


def _allreduce_sweep(args: BenchmarkOptions, ranks, torch) -> List[AllreduceTime]:  # type: ignore[no-untyped-def]
    """Time the distributed mode's allreduce (sum) of float32 tensors of each size in ``args.sizes_kib``; each size's
    time is the slowest rank's mean."""
    rows = []
    for kib in args.sizes_kib:
        size = kib * 1024
        tensor = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(2):  # warm-up: Horovod negotiates a new tensor name and shape once
            ranks.allreduce_sum(tensor, "bench%d" % kib)
        iterations = iterations_for(size)
        start = time.perf_counter()
        for _ in range(iterations):
            ranks.allreduce_sum(tensor, "bench%d" % kib)
        seconds = max(ranks.allgather_object((time.perf_counter() - start) / iterations))
        rows.append(allreduce_time(size, seconds, iterations, ranks.size))
    return rows


def run(args: BenchmarkOptions) -> Tuple[int, Optional[BenchmarkResult]]:
    """Measure as ``args`` say; this rank and, on rank 0, the result (None on the other ranks)."""
    started = time.perf_counter()
    import horovod
    import torch

    if args.distributed == "horovod":
        import horovod.torch  # noqa: F401  (what a Horovod rank imports, timed with torch)
    else:
        import torch.distributed  # noqa: F401
    imported_at = time.time()
    import_seconds = time.perf_counter() - started
    from .comm import join_ranks
    from .fit import local_gpu

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    gpu = local_gpu()
    if gpu is not None:
        torch.cuda.set_device(gpu)
    ranks = join_ranks(args.distributed, gpu)
    torch.manual_seed(args.seed)
    measured: Dict[str, Any] = {}
    if args.kind == ALLREDUCE:
        # no raw TCP stream here: with it, both Horovod ranks of the torch image hung in the collective after it
        # under udocker P1 (2026-11-27, not investigated further); the TensorFlow sweep of the same layout measures
        # the network
        measured["allreduce"] = _allreduce_sweep(args, ranks, torch)
    else:
        measured.update(_timed_model(args, ranks, torch), batch_size=args.batch_size, warmup_steps=args.warmup_steps)
        first = float(measured.pop("first_step_end")) - args.launched
        measured["seconds_to_first_step"] = max(ranks.allgather_object(first))
    facts = ranks.allgather_object(rank_facts(import_seconds, imported_at - args.launched))
    rank, size = ranks.rank, ranks.size
    ranks.barrier()  # no rank leaves the group while another is still in a collective (rank 0 hung in DDP's teardown)
    ranks.shutdown()
    if rank != 0:
        return rank, None
    return 0, BenchmarkResult(rank=0, kind=args.kind, ranks=size, threads=args.threads, gpus=torch.cuda.device_count(),
                              python=sys.version.split()[0], horovod=horovod.__version__, torch=torch.__version__,
                              distributed=args.distributed, **ranks_start(facts), **measured)
