"""What every framework's benchmark measurement shares (:mod:`hvdflow_trainer.benchmark` is the entry point; the
measurements are the framework folders' ``benchmark`` modules): the data each built-in model is measured on, the
timed window, the allreduce's bus bandwidth and message sizes, the raw TCP bandwidth between two ranks, and what a
rank reports of itself."""

from __future__ import annotations

import math
import os
import socket
import time
from typing import Any, Callable, Dict, List, Tuple

from hvdflow_wire.benchmark import AllreduceTime, RankFacts, TcpStream

from .network import interface_address

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


def rank_facts(import_seconds: float, launch_to_import: float) -> RankFacts:
    """What every framework's rank reports of itself for the measurement's ``per_rank``: its start, host, cores, and
    the udocker mode that ran it (None outside udocker)."""
    return RankFacts(import_seconds, launch_to_import, socket.gethostname(), sorted(os.sched_getaffinity(0)),
                     os.environ.get("HVDFLOW_UDOCKER_MODE"))


def ranks_start(facts: List[RankFacts]) -> Dict[str, Any]:
    """The result's fields of the ranks' start: the slowest rank's import and launch-to-import, and every rank's
    facts."""
    return {"import_seconds": max(f.import_seconds for f in facts),
            "launch_to_import_seconds": max(f.launch_to_import for f in facts), "per_rank": list(facts)}


def allreduce_time(size: int, seconds: float, iterations: int, ranks: int) -> AllreduceTime:
    """One message size's row of the allreduce sweep."""
    return AllreduceTime(size, seconds, iterations, bus_bandwidth(size, seconds, ranks))


def iterations_for(size_bytes: int) -> int:
    """Allreduces timed per message size: about ALLREDUCE_BYTES_PER_SIZE in all, between 3 and 50."""
    return max(3, min(50, ALLREDUCE_BYTES_PER_SIZE // size_bytes))


def tcp_bandwidth(rank: int, size: int, broadcast_object: Callable[[Any, int], Any],
                  allgather_object: Callable[[Any], List[Any]]) -> TcpStream:
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
    return TcpStream(TCP_BYTES, max(times), TCP_BYTES / max(times), "rank 0", "rank %d" % last,
                     list(address))  # type: ignore[arg-type]
