"""Was the allocation used well? What limited a recorded run, and what would fix it, from its run record: every
rank's step times (input, compute, communication: :mod:`hvdflow_wire.steps`) and its use of cores, memory and GPU
(:mod:`hvdflow_wire.usage`).

One verdict per run, the first that applies: a straggler (one rank computes much longer per step than the others,
who then wait on it), input-bound, communication-bound, CPU-starved (ranks without GPUs that had their cores a small
share of the time: more ranks than cores, or other work on them, slows every rank alike, so none waits on another),
else compute-bound; a GPU memory note is added where the GPUs held little. ``hvdflow report RUN`` prints it, the
report's record page and allocation figure show it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Optional

INPUT_BOUND_SHARE = 0.25
"""The share of step time spent waiting for batches from which a run is input-bound."""
COMMUNICATION_BOUND_SHARE = 0.35
"""The share of step time spent waiting for the other ranks from which a run is communication-bound."""
CPU_STARVED_USE = 0.5
"""Below this mean CPU use of their cores (ranks without GPUs), the ranks' computing was mostly waiting for a core."""
STRAGGLER_RATIO = 1.5
"""How many times the median rank's compute time per step a straggler takes."""
STRAGGLER_WAIT_SHARE = 0.1
"""The least share of step time the ranks must have waited for each other for a slow rank to be called a straggler."""
GPU_MEMORY_LOW_SHARE = 0.5
"""Below this share of its memory at its peak, a GPU could hold a larger batch."""

PARTS = ("input", "compute", "communication")


@dataclass(frozen=True)
class RankSteps:
    """One rank's step times summed over the run's epochs."""

    rank: int
    hostname: str
    steps: int
    input_seconds: float
    compute_seconds: float
    communication_seconds: float

    @property
    def seconds(self) -> float:
        """All its steps' seconds."""
        return self.input_seconds + self.compute_seconds + self.communication_seconds


@dataclass(frozen=True)
class Verdict:
    """What limited the run (``kind``: straggler, input-bound, communication-bound, cpu-starved, compute-bound or
    unmeasured),
    said in one ``line`` with the fix; ``shares`` of all ranks' step time by part; the ``slowest`` rank (the most
    step seconds); ``ranks``: each rank's sums."""

    kind: str
    line: str
    shares: dict[str, float]
    slowest: Optional[RankSteps]
    ranks: list[RankSteps]


def rank_steps(rank: Mapping[str, Any]) -> Optional[RankSteps]:
    """A run record rank's step times summed, or None where it has none (not measured, or a record made before
    record_version 3)."""
    epochs = rank.get("step_times")
    if not epochs:
        return None
    return RankSteps(rank["rank"], rank["hostname"], sum(e["steps"] for e in epochs),
                     *(sum(e[f"{part}_seconds"] for e in epochs) for part in PARTS))


def epoch_sums(record: Mapping[str, Any]) -> dict[int, tuple[int, list[float]]]:
    """Per epoch, all ranks together: ``(steps timed, [input, compute, communication seconds])``."""
    sums: dict[int, tuple[int, list[float]]] = {}
    for rank in record["ranks"]:
        for epoch in rank.get("step_times") or []:
            steps, seconds = sums.get(epoch["epoch"], (0, [0.0] * len(PARTS)))
            sums[epoch["epoch"]] = (steps + epoch["steps"],
                                    [s + epoch[f"{part}_seconds"] for s, part in zip(seconds, PARTS)])
    return dict(sorted(sums.items()))


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def _unmeasured(record: Mapping[str, Any]) -> str:
    if record.get("record_version", 0) < 3:
        return (f"unmeasured: this record (record_version {record.get('record_version')}) was made before hvdflow "
                f"measured its steps; rerun it to measure them")
    return "unmeasured: its ranks did not time their steps (usage_seconds 0 in the experiment)"


def _gpu_note(record: Mapping[str, Any]) -> str:
    """A note where every rank had a GPU and none used much of its memory."""
    gpus = [(r.get("usage") or {}).get("gpu") for r in record["ranks"]]
    if not gpus or any(g is None for g in gpus):
        return ""
    peak = max(g["memory_used_mib_peak"] / g["memory_total_mib"] for g in gpus if g["memory_total_mib"])
    if peak >= GPU_MEMORY_LOW_SHARE:
        return ""
    return f"; the GPUs held at most {_percent(peak)} of their memory: a larger batch_size fits"


def _cpu_use(record: Mapping[str, Any]) -> Optional[float]:
    """The ranks' mean CPU use of their cores, where every rank was sampled and none had a GPU (else None)."""
    usages = [r.get("usage") for r in record["ranks"]]
    if not usages or any(u is None or u["gpu"] is not None for u in usages):
        return None
    return sum(u["cpu_utilization"] for u in usages) / len(usages)


def _is_straggler(rank: RankSteps, ranks: list[RankSteps], per_step: dict[int, float], median: float) -> bool:
    """Whether ``rank`` computes much longer per step than the median rank while the others wait for it: it waits
    at most half as much (by share of its steps) as the median of the others. Ranks that all wait (more ranks than
    cores, each waiting for a core in turn) have a slowest one by chance, and no straggler."""
    others = [r.communication_seconds / (r.seconds or 1.0) for r in ranks if r.rank != rank.rank]
    if not others or median <= 0 or per_step[rank.rank] < STRAGGLER_RATIO * median:
        return False
    return rank.communication_seconds / (rank.seconds or 1.0) <= 0.5 * statistics.median(others)


def allocation_verdict(record: Mapping[str, Any]) -> Verdict:
    """The verdict on run record ``record`` (a ``run.json`` as read)."""
    measured = [rank_steps(r) for r in record["ranks"]]
    ranks = [r for r in measured if r is not None]
    if not ranks or len(ranks) != len(measured):
        return Verdict("unmeasured", _unmeasured(record), {}, None, ranks)
    total = sum(r.seconds for r in ranks) or 1.0
    shares = {part: sum(getattr(r, f"{part}_seconds") for r in ranks) / total for part in PARTS}
    slowest = max(ranks, key=lambda r: r.seconds)
    per_step = {r.rank: r.compute_seconds / r.steps for r in ranks}
    median = statistics.median(per_step.values())
    straggler = max(ranks, key=lambda r: per_step[r.rank])
    gpu = _gpu_note(record)
    if _is_straggler(straggler, ranks, per_step, median) and shares["communication"] >= STRAGGLER_WAIT_SHARE:
        line = (f"straggler: rank {straggler.rank} on {straggler.hostname} computes {per_step[straggler.rank] / median:.1f}x "
                f"the median rank's time per step and the others wait on it ({_percent(shares['communication'])} of "
                f"step time waiting): see what else runs on {straggler.hostname} or how its CPUs or GPU differ")
        return Verdict("straggler", line + gpu, shares, slowest, ranks)
    if shares["input"] >= INPUT_BOUND_SHARE:
        line = (f"input-bound: the ranks waited {_percent(shares['input'])} of step time for their next batch: give "
                f"each rank more cores for its input pipeline (fewer ranks per node, or a larger cpus_per_task), and "
                f"keep slurm.scratch_dir, where the shards are staged, on node-local disk")
        return Verdict("input-bound", line + gpu, shares, slowest, ranks)
    if shares["communication"] >= COMMUNICATION_BOUND_SHARE:
        line = (f"communication-bound: the ranks waited {_percent(shares['communication'])} of step time for each "
                f"other's gradients: a larger batch_size (fewer exchanges per sample), or fewer ranks per node")
        return Verdict("communication-bound", line + gpu, shares, slowest, ranks)
    cpu_use = _cpu_use(record)
    if cpu_use is not None and cpu_use < CPU_STARVED_USE:
        line = (f"cpu-starved: {_percent(shares['compute'])} of step time computing, but the ranks ran on their cores "
                f"only {_percent(cpu_use)} of the time: other processes share them (more ranks than cores, or other "
                f"jobs on the node); run at most one rank per core, or on nodes of your own")
        return Verdict("cpu-starved", line, shares, slowest, ranks)
    line = (f"compute-bound: {_percent(shares['compute'])} of step time computing (input {_percent(shares['input'])}, "
            f"communication {_percent(shares['communication'])}): more ranks or GPUs would shorten it")
    return Verdict("compute-bound", line + gpu, shares, slowest, ranks)
