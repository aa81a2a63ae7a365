"""Slurm's accounting of a job after it ended (``sacct``), beside hvdflow's own figures in ``hvdflow report``: each
of the job's steps with its elapsed time, CPU time against the CPUs it was given, and peak resident memory.

What sacct says depends on the site's accounting (``JobAcctGatherType``: without a gatherer CPU time and memory are
0); where sacct cannot answer, the report says why instead of figures.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Optional

FORMAT = "JobID,JobName,State,Elapsed,TotalCPU,AllocCPUS,MaxRSS"
_MIB = {"": 1 / 1024 ** 2, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2}
_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class StepAccounting:
    """One line of ``sacct``: the job or one of its steps."""

    step: str
    name: str
    state: str
    elapsed_seconds: float
    cpu_seconds: float
    cpus: int
    max_rss_mib: Optional[float]

    @property
    def cpu_efficiency(self) -> Optional[float]:
        """CPU time over elapsed time times the CPUs (None where either is 0)."""
        if not self.elapsed_seconds or not self.cpus:
            return None
        return self.cpu_seconds / (self.elapsed_seconds * self.cpus)


def duration_seconds(text: str) -> float:
    """Seconds of a Slurm duration (``[D-][H:]M:S[.fff]``, as sacct prints Elapsed and TotalCPU); ValueError if it
    is none."""
    found = _DURATION.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a Slurm duration")
    days, hours, minutes, seconds = found.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def memory_mib(text: str) -> Optional[float]:
    """MiB of a Slurm memory figure (``123456K``, ``12M``, a bare number of bytes); None where it is empty."""
    text = text.strip()
    if not text:
        return None
    unit = text[-1] if text[-1] in "KMGT" else ""
    return float(text[:-1] if unit else text) * _MIB[unit]


def parse_sacct(text: str) -> list[StepAccounting]:
    """The lines of ``sacct --parsable2 --noheader --format=FORMAT``."""
    steps = []
    for line in text.splitlines():
        if not line.strip():
            continue
        step, name, state, elapsed, cpu, cpus, rss = line.split("|")
        steps.append(StepAccounting(step, name, state, duration_seconds(elapsed), duration_seconds(cpu),
                                    int(cpus or 0), memory_mib(rss)))
    return steps


def job_accounting(job: str) -> tuple[list[StepAccounting], Optional[str]]:
    """``(steps, why not)``: what sacct says of ``job``, or why it cannot say (no sacct, no accounting, no such
    job)."""
    try:
        proc = subprocess.run(["sacct", "--jobs", job, "--parsable2", "--noheader", f"--format={FORMAT}"],
                              capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return [], "no sacct on this machine"
    except subprocess.TimeoutExpired:
        return [], "sacct did not answer in 60 s"
    if proc.returncode != 0:
        return [], f"sacct failed: {proc.stderr.strip()[-300:]}"
    steps = parse_sacct(proc.stdout)
    return (steps, None) if steps else ([], f"sacct knows no job {job} (accounting off, or purged)")
