"""A rank's use of its allocation, sampled at a low rate while it trains: the CPU time of its process (every thread,
and children that ended) against the cores it owns, its resident memory, and the utilization and memory of its GPU
where it has one (``nvidia-smi``; absent without a driver, and said so).

One sampler per rank process: :func:`start_sampling` (``train``'s ``main``, before the framework loads) starts a
daemon thread that samples every ``--usage-seconds``; :func:`finish_sampling` (the rank's result, whatever
framework or loop trained it) ends it and returns its :class:`~hvdflow_wire.usage.RankUsage`. The thread reads
``/proc`` and the process's times only: it touches no tensor, so the weights do not depend on it.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import threading
import time
from typing import Callable, List, Mapping, Optional, Tuple

from hvdflow_wire.usage import MAX_SAMPLES, GpuUsage, RankUsage

from .machine import nvidia_driver

GPU_QUERY = ["nvidia-smi", "--query-gpu=name,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]

GpuSample = Tuple[str, float, float, float]
"""A GPU's name, utilization in percent, memory in use and its memory, in MiB."""


def cpu_seconds() -> float:
    """The CPU time of this process so far: every thread's, user and system, and that of children that ended."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def rss_mib(statm: str = "/proc/self/statm") -> float:
    """This process's resident memory now, in MiB."""
    with open(statm) as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def peak_rss_mib() -> float:
    """The largest resident memory this process (or a child that ended) has had, in MiB."""
    return max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) / 1024


def gpu_sample(device: str, run: Callable[..., "subprocess.CompletedProcess[str]"] = subprocess.run
               ) -> Optional[GpuSample]:
    """GPU ``device`` (an index or UUID) as ``nvidia-smi`` sees it now; None where it cannot say."""
    try:
        proc = run(GPU_QUERY + ["--id=%s" % device], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = [part.strip() for part in proc.stdout.strip().split(",")] if proc.returncode == 0 else []
    try:
        return fields[0], float(fields[1]), float(fields[2]), float(fields[3])
    except (IndexError, ValueError):
        return None


def gpu_of_rank(env: Mapping[str, str], driver: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """The GPU the launcher gave this rank (``CUDA_VISIBLE_DEVICES``' first device), or None and why there is none
    (``driver``: the NVIDIA driver's version line, None without one)."""
    if driver is None:
        return None, "no NVIDIA driver on %s" % socket.gethostname()
    devices = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip() not in ("", "-1")]
    return (devices[0], None) if devices else (None, "no GPU given to the rank")


class UsageSampler:
    """Samples this process every ``interval`` seconds in a daemon thread (:meth:`start`, :meth:`finish`)."""

    def __init__(self, interval: float, gpu_device: Optional[str], gpu_absent: Optional[str],
                 clock: Callable[[], float] = time.monotonic,
                 read_gpu: Callable[[str], Optional[GpuSample]] = gpu_sample) -> None:
        if interval <= 0:
            raise ValueError("usage samples every %r seconds: say a positive number" % interval)
        self.interval, self.cores = interval, len(os.sched_getaffinity(0))
        self._gpu_device, self._gpu_absent = gpu_device, gpu_absent
        self._clock, self._read_gpu = clock, read_gpu
        self._samples: List[List[float]] = []
        self._gpu: List[GpuSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hvdflow-usage", daemon=True)
        self._start = self._last = (0.0, 0.0)  # (clock, CPU seconds)

    def start(self) -> None:
        """Take the first reading and start sampling."""
        self._start = self._last = (self._clock(), cpu_seconds())
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        """One sample: the CPU use of the owned cores since the last one, the resident memory, the GPU."""
        now = (self._clock(), cpu_seconds())
        busy = (now[1] - self._last[1]) / max((now[0] - self._last[0]) * self.cores, 1e-9)
        self._samples.append([round(now[0] - self._start[0], 3), round(busy, 4), round(rss_mib(), 1)])
        self._last = now
        if len(self._samples) > MAX_SAMPLES:  # pairs merged: their mean CPU use, their larger memory
            pairs = zip(self._samples[0::2], self._samples[1::2])
            self._samples = [[b[0], round((a[1] + b[1]) / 2, 4), max(a[2], b[2])] for a, b in pairs]
            self.interval *= 2
        if self._gpu_device is not None:
            reading = self._read_gpu(self._gpu_device)
            if reading is not None:
                self._gpu.append(reading)

    def finish(self) -> RankUsage:
        """Stop sampling, take the last sample, and sum the run up."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample()
        wall, cpu = self._last[0] - self._start[0], self._last[1] - self._start[1]
        gpu, absent = None, self._gpu_absent
        if self._gpu:
            gpu = GpuUsage(self._gpu[-1][0], round(sum(g[1] for g in self._gpu) / len(self._gpu), 1),
                           max(g[2] for g in self._gpu), self._gpu[-1][3])
        elif absent is None:
            absent = "nvidia-smi could not read GPU %s" % self._gpu_device
        return RankUsage(self.interval, self.cores, round(wall, 3), round(cpu, 3),
                         round(cpu / max(wall * self.cores, 1e-9), 4), round(peak_rss_mib(), 1), self._samples, gpu,
                         absent)


_running: List[UsageSampler] = []
"""This process's sampler, while it runs."""


def start_sampling(seconds: float) -> None:
    """Sample this rank's use every ``seconds`` (none for 0) until :func:`finish_sampling`."""
    if seconds > 0:
        device, absent = gpu_of_rank(os.environ, nvidia_driver())
        sampler = UsageSampler(seconds, device, absent)
        sampler.start()
        _running.append(sampler)


def finish_sampling() -> Optional[RankUsage]:
    """End this rank's sampling and return what it found (None where none ran)."""
    return _running.pop().finish() if _running else None
