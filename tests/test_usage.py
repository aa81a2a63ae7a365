"""A rank's use of its allocation (hvdflow_trainer.usage, hvdflow_wire.usage): measured on real processes here; the
GPU's readings where no GPU exists come from nvidia-smi's own output format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hvdflow_trainer.usage import UsageSampler, gpu_of_rank, gpu_sample
from hvdflow_wire import WireError
from hvdflow_wire.usage import MAX_SAMPLES, RankUsage
from hvdflow_wire.values import from_json, to_json

SRC = Path(__file__).resolve().parents[1] / "src"

PINNED_CHILD = """
import json, os, sys, time
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from hvdflow_trainer.usage import UsageSampler
sampler = UsageSampler(0.2, None, "no GPU here")
sampler.start()
ballast = bytearray(200 * 2 ** 20)  # 200 MiB made resident
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
# the busy child runs until it has spent 1 s of CPU (however loaded the machine), the sleeper for 1.5 s of wall time
start, deadline = time.process_time(), time.monotonic() + 1.5
while time.monotonic() < deadline or (sys.argv[1] == "busy" and time.process_time() - start < 1.0):
    if sys.argv[1] == "busy":
        sum(range(1000))
    else:
        time.sleep(0.05)
print(json.dumps(sampler.finish().__dict__, default=lambda value: value.__dict__))
"""


def _child(how: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", PINNED_CHILD, how], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_busy_rank_and_a_waiting_one_are_told_apart_on_the_core_they_own() -> None:
    busy, waiting = _child("busy"), _child("wait")
    for usage in (busy, waiting):
        assert usage["cores"] == 1 and usage["wall_seconds"] >= 1.5
        assert usage["peak_rss_mib"] >= 200 and max(s[2] for s in usage["samples"]) >= 200
        assert len(usage["samples"]) >= 5 and [s[0] for s in usage["samples"]] == sorted(s[0] for s in usage["samples"])
        assert usage["gpu"] is None and usage["gpu_absent"] == "no GPU here"
        assert usage["cpu_utilization"] == pytest.approx(usage["cpu_seconds"] / usage["wall_seconds"], abs=0.01)
    # the busy loop spent at least 1 s of CPU on its core; the sleeper spends CPU only on making its memory resident
    # (0.16 s on a loaded CI machine). Shares of wall time are not compared: the suite's load sets them.
    assert busy["cpu_seconds"] >= 1.0 and waiting["cpu_seconds"] < 0.5, (busy, waiting)


def test_a_long_run_keeps_at_most_the_samples_it_may_merging_pairs() -> None:
    ticks = iter(range(10 ** 6))
    sampler = UsageSampler(5.0, None, "none", clock=lambda: float(next(ticks)) * 5)
    sampler._start = sampler._last = (0.0, 0.0)  # as start() would, without its thread
    for _ in range(MAX_SAMPLES + 1):
        sampler.sample()
    usage = sampler.finish()
    times = [s[0] for s in usage.samples]
    assert len(usage.samples) <= MAX_SAMPLES // 2 + 2 and usage.interval_seconds == 10.0
    assert times == sorted(times) and times[1] - times[0] == 10.0 and times[-1] == usage.wall_seconds


NVIDIA_SMI_LINE = "NVIDIA H200, 87, 40321, 143771\n"  # --format=csv,noheader,nounits


def test_the_gpus_readings_are_averaged_and_peaked_or_their_absence_named() -> None:
    readings = iter([("NVIDIA H200", 80.0, 1000.0, 143771.0), ("NVIDIA H200", 90.0, 3000.0, 143771.0),
                     ("NVIDIA H200", 100.0, 2000.0, 143771.0)])
    sampler = UsageSampler(5.0, "3", None, read_gpu=lambda device: next(readings))
    sampler._start = sampler._last = (0.0, 0.0)
    sampler.sample()
    sampler.sample()
    gpu = sampler.finish().gpu
    assert gpu is not None and (gpu.utilization_percent_mean, gpu.memory_used_mib_peak) == (90.0, 3000.0)
    silent = UsageSampler(5.0, "3", None, read_gpu=lambda device: None).finish()
    assert silent.gpu is None and silent.gpu_absent == "nvidia-smi could not read GPU 3"

    def nvidia_smi(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert argv[-1] == "--id=3"
        return subprocess.CompletedProcess(argv, 0, NVIDIA_SMI_LINE, "")

    assert gpu_sample("3", run=nvidia_smi) == ("NVIDIA H200", 87.0, 40321.0, 143771.0)
    assert gpu_sample("3", run=lambda argv, **kw: subprocess.CompletedProcess(argv, 9, "", "No devices")) is None


def test_which_gpu_a_rank_has_or_why_it_has_none() -> None:
    assert gpu_of_rank({"CUDA_VISIBLE_DEVICES": "2"}, None)[1] == f"no NVIDIA driver on {os.uname().nodename}"
    assert gpu_of_rank({"CUDA_VISIBLE_DEVICES": ""}, "NVRM version: 550") == (None, "no GPU given to the rank")
    assert gpu_of_rank({"CUDA_VISIBLE_DEVICES": "-1"}, "NVRM version: 550") == (None, "no GPU given to the rank")
    assert gpu_of_rank({"CUDA_VISIBLE_DEVICES": "2"}, "NVRM version: 550") == ("2", None)


def test_the_usage_travels_as_written_and_a_contradiction_is_refused() -> None:
    usage = UsageSampler(1.0, None, "no GPU given to the rank").finish()
    assert from_json(RankUsage, json.loads(json.dumps(to_json(usage))), "u") == usage
    bad = {**to_json(usage), "gpu": {"name": "x", "utilization_percent_mean": 1.0, "memory_used_mib_peak": 1.0,
                                     "memory_total_mib": 2.0}}
    with pytest.raises(WireError, match="either gpu or gpu_absent"):
        from_json(RankUsage, bad, "u")
