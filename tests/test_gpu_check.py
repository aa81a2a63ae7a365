"""benchmarks/gpu_check.py's account of each way's GPU use (the GPU proof itself needs a lent GPU machine): a rank
that sampled its GPU and one whose node had no driver, in the way's table row and its ``hvdflow report`` text."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO
from rank_results import rank_result_json

_SPEC = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
assert _SPEC is not None and _SPEC.loader is not None
gpu_check = importlib.util.module_from_spec(_SPEC)
sys.modules["gpu_check"] = gpu_check
_SPEC.loader.exec_module(gpu_check)

H200 = {"name": "NVIDIA H200", "utilization_percent_mean": 37.4, "memory_used_mib_peak": 1530.0,
        "memory_total_mib": 143771.0}


def _usage(rank: int, gpu: dict | None, absent: str | None) -> dict:
    return {**rank_result_json(rank)["usage"], "gpu": gpu, "gpu_absent": absent}


def test_each_ways_gpu_use_is_in_its_row_and_its_report_and_a_rank_without_a_driver_says_so() -> None:
    ranks = [rank_result_json(0, usage=_usage(0, H200, None)),
             rank_result_json(1, usage=_usage(1, {**H200, "utilization_percent_mean": 12.0,
                                                    "memory_used_mib_peak": 1610.0}, None))]
    found = gpu_check.allocation("udocker-R1", ranks, 41.26)
    assert found["gpu_busy_percent"] == 37.4 and found["gpu_memory_mib"] == 1610.0
    assert found["gpu_use"] == [H200, ranks[1]["usage"]["gpu"]]
    assert found["report"].startswith("run digits udocker-R1: 2 ranks on h, 41.3 s, record_version 3\n")
    assert "37 % busy, 1530/143771 MiB" in found["report"] and "\nverdict: " in found["report"]
    # the verdict's note on GPU memory: at most 1.1 % of it in use
    assert "larger batch" in found["report"], found["report"]
    driverless = gpu_check.allocation("native", [rank_result_json(0)], 3.0)
    assert driverless["gpu_busy_percent"] is None and driverless["gpu_use"] == ["no NVIDIA driver on h"]
    assert "no NVIDIA driver on h" in driverless["report"]
    digits = {"seconds": 41.26, "val_accuracy": 0.97, "weights_sha256": "ab" * 32, **found}
    row = {"gpus": {"ok": True}, "digits": digits, "resnet50": {"images_per_s": 900.0}, "signal": {"ok": True}}
    text, failed = gpu_check.table({"native": row, "udocker-R1": row})
    header, native, _ = text.splitlines()
    assert header.split()[9:14] == ["GPU", "busy", "%", "GPU", "MiB"] and native.split()[6:8] == ["37", "1610"], text
    assert failed == []
