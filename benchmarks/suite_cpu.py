"""Where a test run's CPU goes: a Linux process-accounting file summed by the kind of process.

    apt-get install acct; touch /tmp/pacct; accton /tmp/pacct     # root: every process that ends is recorded
    CI=true bash scripts/test.sh ...                              # what to measure
    accton off; python3 benchmarks/suite_cpu.py /tmp/pacct

The kernel writes each process's user and system CPU time when it exits; ``dump-acct`` (from acct) prints them with
the process's parent, so a process is told apart by its command and its parents' commands: a Python under proot or
runc is a container's (ranks, evaluation, preparation, image probes), a Python under ``sh`` under Snakemake is one
of the Snakemake processes Snakemake starts for every ``run:`` job, and so on. Figures, not assertions: the machines
are shared and noisy (docs/measurements.md, "Where the suite's time goes").
"""

from __future__ import annotations

import argparse
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_SECOND = 100
"""dump-acct prints CPU times in clock ticks (``getconf CLK_TCK``: 100 on Linux)."""
COMPILERS = frozenset({"cc1plus", "cc1", "ld", "as", "c++", "g++", "gcc", "collect2", "cmake", "make", "gmake"})


@dataclass(frozen=True)
class Process:
    """One ended process as accounting recorded it."""

    command: str
    cpu_seconds: float
    uid: int
    pid: int
    ppid: int


def parse_dump(text: str) -> list[Process]:
    """The processes of ``dump-acct``'s output (``command|version|utime|stime|etime|uid|gid|mem|io|pid|ppid|…``)."""
    processes = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 11:
            continue
        cpu = (float(fields[2]) + float(fields[3])) / TICKS_PER_SECOND
        processes.append(Process(fields[0], cpu, int(fields[5]), int(fields[9]), int(fields[10])))
    return processes


def kind_of(process: Process, parents: list[str]) -> str:
    """What ``process`` was, from its command and its parents' commands (nearest first)."""
    command, near = process.command, parents[:3]
    if command in ("gzip", "tar", "pigz"):
        return "layer extraction (gzip, tar)"
    if command.startswith("slurm"):
        return "Slurm daemons and job steps"
    if command in COMPILERS:
        return "compilers (image builds)"
    if command == "proot" or command.startswith("runc"):
        return "container engines (proot, runc)"
    if command == "snakemake":
        return "Snakemake (main processes)"
    if not command.startswith("python"):
        return "other: " + command
    if "proot" in near or any(p.startswith("runc") for p in near):
        return "Pythons in containers (ranks, evaluation, preparation, image probes)"
    if parents[:1] == ["sh"] and "snakemake" in parents[1:2]:
        return "Snakemake's job processes (one per run: job)"
    if process.uid == 0:
        return "pytest and root's Pythons"
    return "other Pythons (hvdflow commands, launchers, rank tasks)"


def summary(processes: list[Process]) -> dict[str, tuple[int, float]]:
    """Count and CPU seconds per kind (:func:`kind_of`). ``processes`` are in the file's order, the order they ended
    in: a process's parent is the first process after it with its parent's pid (a parent ends after its children;
    over a long run pids are reused, so the pid alone would name the wrong process)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    ended_later: dict[int, list[str]] = {}   # pid -> that process's command and its parents' (nearest first)
    for process in reversed(processes):
        parents = ended_later.get(process.ppid, [])
        ended_later[process.pid] = [process.command, *parents[:7]]
        total = totals[kind_of(process, parents)]
        total[0] += 1
        total[1] += process.cpu_seconds
    return {kind: (int(count), cpu) for kind, (count, cpu) in totals.items()}


def main() -> None:
    """Print the summary of an accounting file, largest first (kinds under 0.5 % of the total folded away)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pacct", type=Path, help="the file accton wrote")
    args = parser.parse_args()
    text = subprocess.run(["dump-acct", str(args.pacct)], capture_output=True, text=True, check=True).stdout
    kinds = summary(parse_dump(text))
    total = sum(cpu for _, cpu in kinds.values())
    print(f"{total:.0f} s of CPU in {sum(count for count, _ in kinds.values())} processes")
    print("| processes | CPU | share | count |\n| --- | --- | --- | --- |")
    for kind, (count, cpu) in sorted(kinds.items(), key=lambda item: -item[1][1]):
        if cpu >= total * 0.005:
            print(f"| {kind} | {cpu:.0f} s | {100 * cpu / total:.0f} % | {count} |")


if __name__ == "__main__":
    main()
