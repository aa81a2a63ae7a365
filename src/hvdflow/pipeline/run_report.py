"""``hvdflow report RUN``: how a recorded run used its allocation, in a terminal: each rank's step times, cores,
memory and GPU, the step split per epoch, Slurm's accounting of the job where it ran in one
(:mod:`hvdflow.slurm.sacct`), and the verdict (:mod:`.verdict`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.errors import HvdflowError
from hvdflow.slurm.sacct import StepAccounting
from hvdflow.text_table import aligned

from .verdict import PARTS, allocation_verdict, epoch_sums


class ReportError(HvdflowError):
    """The run to report on cannot be found or read: the message names the path."""


def record_path(run: Path) -> Path:
    """The run record ``run`` names: a ``run.json``, or the folder holding one (``results/<experiment>``)."""
    path = run / "run.json" if run.is_dir() else run
    if not path.is_file():
        raise ReportError(f"{run}: no run record there (give results/<experiment>/run.json or its folder)")
    return path


def read_record(path: Path) -> dict[str, Any]:
    """The run record in ``path``; ReportError naming it where it is not one."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: not a readable run record: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("ranks"), list) or "record_version" not in record:
        raise ReportError(f"{path}: not a run record (no record_version or ranks)")
    return record


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """``header`` and ``rows`` aligned, the first column to the left and the figures to the right."""
    return aligned([header, *rows], right_from=1)


def epoch_rows(record: Mapping[str, Any]) -> list[list[str]]:
    """Per epoch, the ranks' timed steps, the mean step in ms and the shares of their step time (all ranks
    together)."""
    rows = []
    for epoch, (steps, seconds) in epoch_sums(record).items():
        total = sum(seconds) or 1.0
        rows.append([str(epoch), str(steps), f"{1000 * total / steps:.1f}", *(f"{100 * s / total:.0f} %" for s in seconds)])
    return rows


EPOCH_HEADER = ["epoch", "steps", "ms/step", "input", "compute", "communication"]


def _accounting(job: str, steps: list[StepAccounting], why_not: Optional[str]) -> list[str]:
    """Slurm's view of the run's job, each step a row."""
    if why_not is not None:
        return ["", f"Slurm's accounting of job {job}: {why_not}"]
    rows = [[s.step, s.name, s.state, f"{s.elapsed_seconds:.0f}", f"{s.cpu_seconds:.1f}", str(s.cpus),
             "-" if s.cpu_efficiency is None else f"{100 * s.cpu_efficiency:.0f} %",
             "-" if s.max_rss_mib is None else f"{s.max_rss_mib:.0f} MiB"] for s in steps]
    return ["", f"Slurm's accounting of job {job} (sacct):",
            *_table(["step", "name", "state", "elapsed s", "CPU s", "CPUs", "CPU efficiency", "max RSS"], rows)]


def report_text(record: Mapping[str, Any],
                accounting: Optional[tuple[list[StepAccounting], Optional[str]]] = None) -> str:
    """The report on run record ``record``, with sacct's ``(steps, why not)`` of its Slurm job where it ran in one."""
    verdict = allocation_verdict(record)
    lines = [f"run {record['experiment']}: {len(record['ranks'])} ranks on {', '.join(record['hosts'])}, "
             f"{record['seconds']} s, record_version {record['record_version']}", ""]
    steps = {r.rank: r for r in verdict.ranks}
    rows = []
    for rank in record["ranks"]:
        usage, mine = rank.get("usage"), steps.get(rank["rank"])
        split = ([f"{100 * getattr(mine, f'{p}_seconds') / (mine.seconds or 1.0):.0f} %" for p in PARTS]
                 if mine else ["-"] * 3)
        gpu = "-" if not usage else (usage["gpu_absent"] if usage["gpu"] is None else
                                     f"{usage['gpu']['utilization_percent_mean']:.0f} % busy, "
                                     f"{usage['gpu']['memory_used_mib_peak']:.0f}/{usage['gpu']['memory_total_mib']:.0f} MiB")
        rows.append([str(rank["rank"]), rank["hostname"], str(mine.steps) if mine else "-", *split,
                     f"{100 * usage['cpu_utilization']:.0f} %" if usage else "-",
                     f"{usage['peak_rss_mib']:.0f} MiB" if usage else "-", gpu])
    lines += _table(["rank", "host", "steps", "input", "compute", "communication", "CPU use", "peak memory", "GPU"],
                    rows)
    epochs = epoch_rows(record)
    if epochs:
        lines += ["", *_table(EPOCH_HEADER, epochs)]
    if verdict.slowest is not None and len(verdict.ranks) > 1:
        lines += ["", f"slowest rank: {verdict.slowest.rank} on {verdict.slowest.hostname} "
                      f"({verdict.slowest.seconds:.2f} s in {verdict.slowest.steps} steps)"]
    if accounting is not None and record.get("slurm"):
        lines += _accounting(record["slurm"]["job_id"], *accounting)
    return "\n".join([*lines, "", f"verdict: {verdict.line}"]) + "\n"
