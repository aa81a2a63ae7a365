"""One benchmark measurement as Horovod ranks: training throughput of a model on synthetic data, or Horovod's allreduce
bandwidth against message size with the raw TCP bandwidth between two of the same ranks.

Every rank runs this module (``python3 -m hvdflow_trainer.benchmark``) as the launcher starts it, in the container or
the native venv, and writes ``rank-<r>.json`` into ``--out``: rank 0's holds the measurement. The times it reports:

- ``import_seconds``: importing the framework and Horovod's API for it (TensorFlow and Horovod's Keras API, or torch
  and ``horovod.torch``, or torch and ``torch.distributed``) in this process (the slowest rank);
- ``launch_to_import_seconds``: from the launcher's start of the ranks (``--launched``, Unix time) to the end of those
  imports: what the runtime adds to starting a rank (udocker's Python, proot) counts here;
- ``seconds_to_first_step``: from the launcher's start to the end of the first training step (the slowest rank);
- ``samples_per_second``: the global training throughput after ``--warmup-steps`` steps, over ``--steps`` steps,
  or over a longer pass where those took less than ``--min-seconds`` (:func:`steps_for_window`; ``steps`` says how
  many; ``measured_seconds`` how long).

The data are one synthetic batch of the real shape of the data the model is made for (:data:`SHAPES`), fixed by the
seed and repeated: no dataset and no input pipeline are measured, only the model, the optimizer and Horovod.

This module is the entry point and the framework-neutral part (the raw TCP bandwidth included); the measurements are
:mod:`hvdflow_trainer.keras.benchmark` or, with ``--framework pytorch``, :mod:`hvdflow_trainer.pytorch.benchmark`.
"""

from __future__ import annotations

import argparse
import fcntl
import math
import os
import socket
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from hvdflow_index import write_json

from . import user_code
from .rank_exit import run_rank
from .user_code import USER_MODEL

SHAPES: Dict[str, Tuple[Tuple[int, ...], int, bool]] = {
    "mlp": ((8, 8, 1), 10, False),  # scikit-learn's digits, the demo's data
    "small-cnn": ((120, 120, 12), 19, True),  # a BigEarthNet-S2 patch, 12 bands at 120x120, 19 classes
    "resnet50": ((120, 120, 12), 19, True),
}
"""Per model: (input shape, classes, multi-label) of the data it is benchmarked on."""

ALLREDUCE = "allreduce"
TCP_BYTES = 256 * 2 ** 20
TCP_CHUNK = 4 * 2 ** 20
ALLREDUCE_BYTES_PER_SIZE = 256 * 2 ** 20
SIOCGIFADDR = 0x8915


def bus_bandwidth(size_bytes: int, seconds: float, ranks: int) -> float:
    """Allreduce bus bandwidth in bytes/s: the algorithm bandwidth times 2(n-1)/n, NCCL-tests' convention, which a
    ring allreduce's per-link traffic gives and which does not change with the rank count on a perfect network."""
    return size_bytes / seconds * 2 * (ranks - 1) / ranks


WINDOW_MARGIN = 1.2
"""How much longer than ``--min-seconds`` a second pass aims to be: the first pass's rate is a warm-up's."""


def steps_for_window(steps: int, seconds: float, min_seconds: float) -> int:
    """The timed steps of a longer pass where ``steps`` timed steps took ``seconds``, less than ``min_seconds`` (a
    window that short is noise: 200 steps of the digits MLP are 67 ms); 0 where they were enough. At least
    :data:`WINDOW_MARGIN` times ``steps``, so passes repeated until one is long enough end. Rank 0 decides and every
    rank follows (the ranks must run the same steps)."""
    if seconds >= min_seconds:
        return 0
    return math.ceil(steps * WINDOW_MARGIN * max(1.0, min_seconds / max(seconds, 1e-6)))


def long_enough_window(steps: int, seconds: float, min_seconds: float, rank0: Callable[[int], int],
                       timed_pass: Callable[[int], float]) -> Tuple[int, float]:
    """The timed steps and seconds: the first pass's (``steps`` in ``seconds``) or, where it was shorter than
    ``min_seconds``, those of longer passes until one is long enough (:func:`steps_for_window`: each at least
    :data:`WINDOW_MARGIN` times the last, so this ends). ``rank0(n)`` is rank 0's ``n`` on every rank (a
    collective); ``timed_pass(n)`` runs ``n + 1`` more steps and returns the seconds of the last ``n`` (the
    collective and a framework's set-up of the pass are no steps)."""
    while True:
        longer = rank0(steps_for_window(steps, seconds, min_seconds))
        if not longer:
            return steps, seconds
        steps, seconds = longer, timed_pass(longer)


def rank_facts(import_seconds: float, launch_to_import: float) -> Dict[str, Any]:
    """What every framework's rank reports of itself for the measurement's ``per_rank``: its start, host, cores, and
    the udocker mode that ran it (None outside udocker)."""
    return {"import_seconds": import_seconds, "launch_to_import": launch_to_import, "hostname": socket.gethostname(),
            "cpus": sorted(os.sched_getaffinity(0)), "execmode": os.environ.get("HVDFLOW_UDOCKER_MODE")}


def iterations_for(size_bytes: int) -> int:
    """Allreduces timed per message size: about ALLREDUCE_BYTES_PER_SIZE in all, between 3 and 50."""
    return max(3, min(50, ALLREDUCE_BYTES_PER_SIZE // size_bytes))


def interface_address(interface: str) -> str:
    """The IPv4 address of ``interface`` (the one Gloo binds to), or of this host's name if it has none."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", interface[:15].encode()))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


def tcp_bandwidth(rank: int, size: int, broadcast_object: Callable[[Any, int], Any],
                  allgather_object: Callable[[Any], List[Any]]) -> Dict[str, object]:
    """Stream TCP_BYTES over one plain TCP connection from rank 0 to the last rank (on another node when the ranks
    span nodes), on the interface Gloo uses; bytes/s, the slower side's view. ``broadcast_object(obj, root)`` and
    ``allgather_object(obj)`` are the framework's (every rank calls this)."""
    last = size - 1
    server = None
    address = None
    if rank == last:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("0.0.0.0", 0))
        server.listen(1)
        address = (interface_address(os.environ.get("HOROVOD_GLOO_IFACE", "lo")), server.getsockname()[1])
    address = broadcast_object(address, last)
    seconds = 0.0
    if rank == last:
        connection, _ = server.accept()  # type: ignore[union-attr]
        received, start = 0, time.perf_counter()
        while received < TCP_BYTES:
            chunk = connection.recv(TCP_CHUNK)
            if not chunk:
                raise RuntimeError("the TCP benchmark's sender closed after %d of %d bytes" % (received, TCP_BYTES))
            received += len(chunk)
        seconds = time.perf_counter() - start
        connection.sendall(b"k")
        connection.close()
        server.close()  # type: ignore[union-attr]
    elif rank == 0:
        sender = socket.create_connection(tuple(address), timeout=120)  # type: ignore[arg-type]
        buffer = b"\0" * TCP_CHUNK
        start = time.perf_counter()
        for _ in range(TCP_BYTES // TCP_CHUNK):
            sender.sendall(buffer)
        sender.recv(1)
        seconds = time.perf_counter() - start
        sender.close()
    times = allgather_object(seconds)
    return {"bytes": TCP_BYTES, "seconds": max(times), "bytes_per_second": TCP_BYTES / max(times),
            "from": "rank 0", "to": "rank %d" % last, "address": list(address)}  # type: ignore[arg-type]


def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point of every rank."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="folder of rank 0's result.json")
    parser.add_argument("--kind", required=True, choices=sorted(SHAPES) + [ALLREDUCE, USER_MODEL],
                        help="a built-in model, the allreduce sweep, or user: a user's model (--model-code, "
                             "--model-build, --input-shape, --num-classes)")
    parser.add_argument("--input-shape", type=int, nargs=3, help="user: H W C of the synthetic batch")
    parser.add_argument("--num-classes", type=int, help="user: the classes of the synthetic labels")
    parser.add_argument("--multi-label", action="store_true", help="user: multi-hot labels")
    user_code.add_options(parser)
    parser.add_argument("--launched", type=float, required=True, help="Unix time the launcher started the ranks")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--hidden-units", type=int, default=64)
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first (at least 1)")
    parser.add_argument("--steps", type=int, default=30, help="steps timed after the warm-up")
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="time more steps where --steps took less than this (steps_for_window)")
    parser.add_argument("--sizes-kib", type=int, nargs="+", default=[1, 64, 1024, 16384, 65536])
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow's intra-op threads: the rank's cores")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--framework", choices=("tensorflow", "pytorch"), default="tensorflow")
    parser.add_argument("--distributed", choices=("horovod", "ddp"), default="horovod", help="pytorch: Horovod or DDP")
    args = parser.parse_args(argv)
    if args.framework == "pytorch":  # the framework's folder: it times its own imports
        from .pytorch.benchmark import run
    else:
        from .keras.benchmark import run  # type: ignore[no-redef]

    result = run(args)
    write_json(os.path.join(args.out, "rank-%d.json" % result["rank"]), result)


if __name__ == "__main__":
    run_rank(main)
