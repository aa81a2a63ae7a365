"""What limited a run, from its record (hvdflow.pipeline.verdict), and ``hvdflow report`` printing it: each verdict
from the step times and GPU figures that call for it, records without step times, and a run that is not there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from hvdflow.pipeline.plots import plot_allocation
from hvdflow.pipeline.run_report import ReportError, read_record, record_path, report_text
from hvdflow.pipeline.verdict import allocation_verdict
from hvdflow.slurm.sacct import duration_seconds, memory_mib, parse_sacct

REPO = Path(__file__).resolve().parents[1]


def _rank(rank: int, input_s: float, compute_s: float, communication_s: float, steps: int = 10,
          gpu: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """A record's rank whose two epochs took these seconds in all."""
    halves = [{"epoch": e, "steps": steps // 2, "input_seconds": input_s / 2, "compute_seconds": compute_s / 2,
               "communication_seconds": communication_s / 2} for e in (0, 1)]
    usage = {"interval_seconds": 5.0, "cores": 1, "wall_seconds": 3.0, "cpu_seconds": 2.4, "cpu_utilization": 0.8,
             "peak_rss_mib": 600.0, "samples": [], "gpu": gpu, "gpu_absent": None if gpu else "no NVIDIA driver on n1"}
    return {"rank": rank, "hostname": f"n{rank + 1}", "step_times": halves, "usage": usage}


def _record(*ranks: dict[str, Any], version: int = 3) -> dict[str, Any]:
    return {"record_version": version, "experiment": "e", "hosts": sorted({r["hostname"] for r in ranks}),
            "seconds": 9.5, "ranks": list(ranks)}


def test_each_verdict_comes_from_the_times_that_call_for_it() -> None:
    # the ranks waited for batches 40 % of their step time
    verdict = allocation_verdict(_record(_rank(0, 4.0, 5.0, 1.0), _rank(1, 4.0, 5.0, 1.0)))
    assert verdict.kind == "input-bound" and verdict.shares["input"] == pytest.approx(0.4)
    assert verdict.line.startswith("input-bound: the ranks waited 40 % of step time for their next batch")
    # half of the time waiting for each other's gradients
    verdict = allocation_verdict(_record(_rank(0, 0.5, 4.5, 5.0), _rank(1, 0.5, 4.5, 5.0)))
    assert verdict.kind == "communication-bound" and "waited 50 % of step time for each other's gradients" in verdict.line
    assert "larger batch_size" in verdict.line
    # rank 2 computes 3x as long per step as the others, who wait on it: named with its node, before anything else
    verdict = allocation_verdict(_record(_rank(0, 0.1, 2.0, 6.0), _rank(1, 0.1, 2.0, 6.0), _rank(2, 0.1, 6.0, 2.0)))
    assert verdict.kind == "straggler" and verdict.line.startswith("straggler: rank 2 on n3 computes 3.0x the median")
    assert verdict.slowest is not None and verdict.slowest.rank in (0, 1)  # the waiting ranks' steps took longest
    # four ranks on two cores: one computed longest by chance, but it waited as long as the others: no straggler
    verdict = allocation_verdict(_record(_rank(0, 0.4, 0.4, 8.5), _rank(1, 0.3, 2.4, 7.3), _rank(2, 0.7, 0.5, 8.7),
                                         _rank(3, 0.7, 1.3, 7.9)))
    assert verdict.kind == "communication-bound", verdict.line
    # mostly computing
    verdict = allocation_verdict(_record(_rank(0, 0.5, 8.5, 1.0), _rank(1, 0.5, 8.5, 1.0)))
    assert verdict.kind == "compute-bound" and verdict.line.startswith("compute-bound: 85 % of step time computing")
    assert sum(verdict.shares.values()) == pytest.approx(1.0)
    # mostly computing, on cores the ranks had a fifth of the time: every rank slowed alike, none waiting on another
    starved = _record(_rank(0, 0.5, 8.5, 1.0), _rank(1, 0.5, 8.5, 1.0))
    for rank in starved["ranks"]:
        rank["usage"]["cpu_utilization"] = 0.2
    verdict = allocation_verdict(starved)
    assert verdict.kind == "cpu-starved" and "ran on their cores only 20 % of the time" in verdict.line
    starved["ranks"][0]["usage"]["gpu"] = {"name": "g", "utilization_percent_mean": 90.0, "memory_used_mib_peak": 9e4,
                                           "memory_total_mib": 1e5}
    starved["ranks"][0]["usage"]["gpu_absent"] = None
    assert allocation_verdict(starved).kind == "compute-bound"  # a GPU's rank leaves its core idle by design


def test_gpus_that_held_little_of_their_memory_add_a_larger_batch() -> None:
    gpu = {"name": "NVIDIA H200", "utilization_percent_mean": 35.0, "memory_used_mib_peak": 9000.0,
           "memory_total_mib": 143771.0}
    verdict = allocation_verdict(_record(_rank(0, 0.5, 8.5, 1.0, gpu=gpu), _rank(1, 0.5, 8.5, 1.0, gpu=gpu)))
    assert verdict.line.endswith("; the GPUs held at most 6 % of their memory: a larger batch_size fits")
    full = {**gpu, "memory_used_mib_peak": 120000.0}
    assert "GPUs held" not in allocation_verdict(_record(_rank(0, 0.5, 8.5, 1.0, gpu=full))).line


def test_records_without_step_times_say_why() -> None:
    old = _record(_rank(0, 1, 1, 1), version=2)
    del old["ranks"][0]["step_times"]  # a record_version 2 run had none
    verdict = allocation_verdict(old)
    assert verdict.kind == "unmeasured" and "record_version 2" in verdict.line and verdict.shares == {}
    off = _record(_rank(0, 1, 1, 1))
    off["ranks"][0]["step_times"] = None
    assert "usage_seconds 0" in allocation_verdict(off).line
    assert "verdict: unmeasured" in report_text(old) and "  -  " in report_text(old)


def test_the_report_prints_ranks_epochs_the_slowest_rank_and_the_verdict(tmp_path: Path) -> None:
    record = _record(_rank(0, 4.0, 5.0, 1.0), _rank(1, 4.0, 5.5, 1.0))
    text = report_text(record)
    lines = text.splitlines()
    assert lines[0] == "run e: 2 ranks on n1, n2, 9.5 s, record_version 3"
    header = next(line for line in lines if line.startswith("rank"))
    assert header.split() == ["rank", "host", "steps", "input", "compute", "communication", "CPU", "use", "peak",
                              "memory", "GPU"]
    row = next(line for line in lines if line.startswith("1 "))
    assert row.split()[:9] == ["1", "n2", "10", "38", "%", "52", "%", "10", "%"]
    epochs = [line.split() for line in lines if line[:1].isdigit() and "n" not in line]
    # each epoch: 5 steps on each rank, 5 s and 5.25 s: 1025 ms a step
    assert [e[:3] for e in epochs] == [["0", "10", "1025.0"], ["1", "10", "1025.0"]]
    assert "slowest rank: 1 on n2 (10.50 s in 10 steps)" in text and lines[-1].startswith("verdict: input-bound")
    run = tmp_path / "results" / "e"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(record))
    proc = subprocess.run([sys.executable, "-m", "hvdflow", "report", str(run)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout == text, proc.stderr


def test_a_run_that_is_not_there_or_not_a_record_is_named(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match=f"{tmp_path}/missing: no run record there"):
        record_path(tmp_path / "missing")
    (tmp_path / "run.json").write_text('{"ranks": []}')
    with pytest.raises(ReportError, match="run.json: not a run record"):
        read_record(record_path(tmp_path))
    (tmp_path / "run.json").write_text("{")
    with pytest.raises(ReportError, match="run.json: not a readable run record"):
        read_record(record_path(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "hvdflow", "report", str(tmp_path / "missing")], capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and proc.stderr == (f"hvdflow: error: {tmp_path}/missing: no run record there (give "
                                                    "results/<experiment>/run.json or its folder)\n")


SACCT = """42|hvdflow-train|COMPLETED|00:01:30|00:02:15.500|2|
42.batch|batch|COMPLETED|00:01:30|00:00:10|2|120340K
42.0|python3|COMPLETED|00:01:20|02:05.250|2|1.5G
"""


def test_slurms_accounting_is_read_and_shown_beside_hvdflows() -> None:
    steps = parse_sacct(SACCT)
    assert [(s.step, s.elapsed_seconds, s.cpu_seconds, s.cpus) for s in steps] == [
        ("42", 90.0, 135.5, 2), ("42.batch", 90.0, 10.0, 2), ("42.0", 80.0, 125.25, 2)]
    assert steps[0].max_rss_mib is None and steps[1].max_rss_mib == pytest.approx(117.52, abs=0.01)
    assert steps[2].max_rss_mib == 1536.0 and steps[2].cpu_efficiency == pytest.approx(125.25 / 160)
    assert duration_seconds("1-02:03:04") == 93784 and memory_mib("1048576") == 1.0
    with pytest.raises(ValueError, match="'n/a' is not a Slurm duration"):
        duration_seconds("n/a")
    record = {**_record(_rank(0, 0.5, 8.5, 1.0)), "slurm": {"job_id": "42"}}
    text = report_text(record, (steps, None))
    assert "Slurm's accounting of job 42 (sacct):" in text
    row = next(line for line in text.splitlines() if line.startswith("42.0 "))
    assert row.split() == ["42.0", "python3", "COMPLETED", "80", "125.2", "2", "78", "%", "1536", "MiB"]
    assert "Slurm's accounting of job 42: no sacct on this machine" in report_text(record, ([], "no sacct on this machine"))


def test_the_allocation_figure_is_drawn_with_and_without_step_times(tmp_path: Path) -> None:
    record = _record(_rank(0, 4.0, 5.0, 1.0), _rank(1, 4.0, 5.5, 1.0))
    for rank in record["ranks"]:
        rank["usage"]["samples"] = [[5.0, 0.5, 600.0], [10.0, 0.75, 640.0]]
    (tmp_path / "run.json").write_text(json.dumps(record))
    plot_allocation(tmp_path / "run.json", tmp_path / "allocation.png", "e")
    old = _record(_rank(0, 1, 1, 1), version=2)
    del old["ranks"][0]["step_times"], old["ranks"][0]["usage"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    plot_allocation(tmp_path / "old.json", tmp_path / "old.png", "e")
    for png in ("allocation.png", "old.png"):
        assert (tmp_path / png).read_bytes().startswith(b"\x89PNG") and (tmp_path / png).stat().st_size > 10_000
