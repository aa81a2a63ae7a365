"""Benchmark: what sampling a rank's use of its allocation (``hvdflow_trainer.usage``) costs a training step.

    PYTHONPATH=src python3 benchmarks/usage_sampling.py --reps 5

Two figures, side by side in one run:

- one sample's cost (the CPU time, the resident memory from /proc, no GPU), timed over many samples; at the default
  interval that cost, spread over the interval, is the sampler's share of a step (goal: at most 1 %);
- a step loop (one thread on one core: numpy matrix products, about a training step's work each) timed with no
  sampler, with the default 5 s interval and with a 50 ms interval (100 times the default rate), interleaved
  repetition by repetition so that the machine's noise hits them alike; the medians' ratios.

Figures, not assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Optional

import numpy as np

from hvdflow_trainer.usage import UsageSampler
from hvdflow_wire.usage import DEFAULT_USAGE_SECONDS


def one_sample_seconds(samples: int) -> float:
    """The mean wall time of one sample (no GPU)."""
    sampler = UsageSampler(3600.0, None, "no GPU measured")
    sampler._start = sampler._last = (time.monotonic(), 0.0)  # as start() would, without its thread
    began = time.perf_counter()
    for _ in range(samples):
        sampler.sample()
    return (time.perf_counter() - began) / samples


def steps_seconds(steps: int, interval: Optional[float]) -> float:
    """Seconds ``steps`` matrix-product steps take with a sampler every ``interval`` seconds (None: no sampler)."""
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    sampler = UsageSampler(interval, None, "no GPU measured") if interval else None
    if sampler:
        sampler.start()
    began = time.perf_counter()
    for _ in range(steps):
        a = np.tanh(a @ a.T / 256)
    seconds = time.perf_counter() - began
    if sampler:
        sampler.finish()
    return seconds


def main() -> None:
    """Print one sample's cost, then each repetition's step times and the medians' ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20000,
                        help="about 7 s here: the default interval samples in each")
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cost = one_sample_seconds(2000)
    print(f"one sample: {cost * 1e6:.1f} us; at the default {DEFAULT_USAGE_SECONDS} s interval "
          f"{100 * cost / DEFAULT_USAGE_SECONDS:.5f} % of the rank's time")
    ways = {"none": None, "default 5 s": DEFAULT_USAGE_SECONDS, "50 ms": 0.05}
    times: dict[str, list[float]] = {way: [] for way in ways}
    for rep in range(args.reps):
        for way, interval in ways.items():
            times[way].append(steps_seconds(args.steps, interval))
        print(f"rep {rep + 1}: " + ", ".join(f"{way} {times[way][-1]:.3f} s" for way in ways))
    base = statistics.median(times["none"])
    print(f"per step without sampling: {1000 * base / args.steps:.3f} ms")
    for way in ("default 5 s", "50 ms"):
        print(f"{way} / none (medians): {statistics.median(times[way]) / base:.4f}")


if __name__ == "__main__":
    main()
