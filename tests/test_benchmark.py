"""The benchmark's arithmetic: the config it accepts and the measurements it plans, mean ± 1.96σ, scaling
efficiency, the goals udocker is held to and how far a missed one is, the allreduce bus bandwidth; and its figures."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO
from hvdflow.config.benchmark import (
    BENCHMARK_RUNTIMES,
    MODELS,
    NAME_PATTERN,
    Measurement,
    benchmark_spec,
    framework_of,
    runtime_kind,
)
from hvdflow.errors import ConfigError
from hvdflow.pipeline import benchmark_plots
from hvdflow.pipeline.benchmark import goals, mean_ci, read_rows, summarize, table_rows
from hvdflow_trainer.keras import models
from hvdflow_trainer.measurement import SHAPES, bus_bandwidth, iterations_for, long_enough_window, steps_for_window

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_benchmark_knows_the_trainers_models_and_their_data_shapes() -> None:
    assert MODELS == models.MODELS == tuple(sorted(SHAPES, key=models.MODELS.index))


def test_measurements_are_planned_repetition_by_repetition_and_allreduce_only_with_two_ranks() -> None:
    spec = benchmark_spec({"image": "hvdflow-cpu", "models": ["mlp"], "ranks": [1, 2], "nodes": [1, 2],
                           "runtimes": ["udocker", "native"], "repetitions": 2})
    plan = spec.measurements()
    assert plan[0] == Measurement("mlp", 1, 1, "udocker", 0) and plan[1] == Measurement("mlp", 1, 1, "native", 0)
    assert {m.rep for m in plan[:len(plan) // 2]} == {0}
    assert not [m for m in plan if m.nodes > m.ranks or (m.kind == "allreduce" and m.ranks < 2)]
    # per repetition: mlp at 1/1, 2/1, 2/2 and allreduce at 2/1, 2/2, in two runtimes
    assert len(plan) == 2 * 2 * (3 + 2)
    assert spec.layouts() == [(1, 1), (2, 1), (2, 2)]
    assert Measurement("small-cnn", 4, 2, "native", 1).name == "small-cnn-r4-n2-native-1"


@pytest.mark.parametrize("section, message", [
    ({"models": ["vgg16"]}, "benchmark.models: 'vgg16' is not one of mlp, small-cnn, resnet50"),
    ({"repetitions": 0}, "benchmark.repetitions: 0 must be an integer of at least 1"),
    ({"min_seconds": -1}, "benchmark.min_seconds: -1 must be an integer of at least 0"),
    ({"min_seconds": 2.5}, "benchmark.min_seconds: 2.5 must be an integer of at least 0"),
    ({"ranks": []}, "benchmark.ranks: give a non-empty list of integers"),
    ({"ranks": [0, 2]}, "benchmark.ranks: 0 is less than 1"),
    ({"runtimes": ["docker"]}, "benchmark.runtimes: 'docker' is not one of udocker, udocker-P1, udocker-R1, native"),
    ({"nodes": [4], "ranks": [2]}, "benchmark.nodes: every node count (4) exceeds every rank count (2)"),
    ({"image": ""}, "benchmark.image: name the catalogue's image"),
    ({"frameworks": ["mxnet"]}, "benchmark.frameworks: 'mxnet' is not one of tensorflow, pytorch-horovod, pytorch-ddp"),
    ({"frameworks": ["tensorflow", "pytorch-ddp"]},
     "benchmark.torch_image: frameworks pytorch-ddp run in a catalogue image that holds torch: name it"),
])
def test_bad_benchmark_keys_are_named(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        benchmark_spec({"image": "hvdflow-cpu", "models": ["mlp"], "ranks": [1, 2], **section})


def test_frameworks_are_compared_over_the_same_models_and_pytorchs_run_in_udocker_in_its_image() -> None:
    spec = benchmark_spec({"image": "hvdflow-cpu", "torch_image": "hvdflow-torch-cpu", "models": ["mlp"], "ranks": [2],
                           "runtimes": ["udocker", "native"], "repetitions": 1,
                           "frameworks": ["tensorflow", "pytorch-horovod", "pytorch-ddp"]})
    assert spec.kinds() == ["mlp", "allreduce", "torch-mlp", "torch-allreduce", "ddp-mlp", "ddp-allreduce"]
    assert [m.name for m in spec.measurements()] == [
        "mlp-r2-n1-udocker-0", "mlp-r2-n1-native-0", "allreduce-r2-n1-udocker-0", "allreduce-r2-n1-native-0",
        "torch-mlp-r2-n1-udocker-0", "torch-allreduce-r2-n1-udocker-0", "ddp-mlp-r2-n1-udocker-0",
        "ddp-allreduce-r2-n1-udocker-0"]
    assert (spec.image_of("mlp"), spec.image_of("ddp-mlp")) == ("hvdflow-cpu", "hvdflow-torch-cpu")
    assert framework_of("torch-allreduce") == ("pytorch-horovod", "allreduce") and framework_of("mlp") == ("tensorflow", "mlp")
    assert spec.program_args("ddp-mlp")[:6] == ["--kind", "mlp", "--framework", "pytorch", "--distributed", "ddp"]
    assert spec.program_args("torch-allreduce")[:6] == ["--kind", "allreduce", "--framework", "pytorch", "--distributed",
                                                        "horovod"]
    assert spec.program_args("mlp")[:2] == ["--kind", "mlp"] and "--framework" not in spec.program_args("mlp")


def test_a_users_model_is_measured_under_its_own_name_on_the_data_shape_the_config_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "cnn.py").write_text("def build(input_shape, num_classes, multi_label, filters=8):\n    pass\n")
    unet = {"code": "mine", "build": "cnn:build", "params": {"filters": 4}, "input_shape": [16, 16, 3],
            "num_classes": 5}
    section = {"image": "hvdflow-cpu", "models": ["mlp", "unet"], "ranks": [2], "allreduce": False,
               "user_models": {"unet": unet}}
    spec = benchmark_spec(section)
    assert [m.name for m in spec.measurements()] == ["mlp-r2-n1-udocker-0", "unet-r2-n1-udocker-0",
                                                     "mlp-r2-n1-udocker-1", "unet-r2-n1-udocker-1",
                                                     "mlp-r2-n1-udocker-2", "unet-r2-n1-udocker-2"]
    assert spec.program_args("unet")[:12] == [
        "--kind", "user", "--model-code", str(tmp_path / "mine"), "--model-build", "cnn:build", "--model-params",
        '{"filters": 4}', "--input-shape", "16", "16", "3"]
    assert spec.program_args("unet")[12:14] == ["--num-classes", "5"] and "--multi-label" not in spec.program_args("unet")
    assert spec.read_paths("unet") == [tmp_path / "mine"] and spec.read_paths("mlp") == []
    with pytest.raises(ConfigError, match=r"benchmark\.models: 'vgg' is not one of mlp, small-cnn, resnet50, unet"):
        benchmark_spec({**section, "models": ["vgg"]})
    with pytest.raises(ConfigError, match=r"benchmark\.user_models\.mlp: name it in lower-case letters"):
        benchmark_spec({**section, "user_models": {"mlp": unet}})
    with pytest.raises(ConfigError, match=r"benchmark\.user_models\.unet\.build: other:build: no module other"):
        benchmark_spec({**section, "user_models": {"unet": {**unet, "build": "other:build"}}})
    # a torch module: measured by both PyTorch frameworks under their prefixes, never by TensorFlow
    torch_unet = {**unet, "framework": "pytorch"}
    both = benchmark_spec({**section, "user_models": {"unet": torch_unet}, "repetitions": 1,
                           "frameworks": ["tensorflow", "pytorch-horovod", "pytorch-ddp"], "torch_image": "t"})
    assert both.kinds() == ["mlp", "torch-mlp", "torch-unet", "ddp-mlp", "ddp-unet"]
    assert both.program_args("torch-unet")[:2] == ["--kind", "user"] and both.image_of("ddp-unet") == "t"
    assert both.program_args("torch-unet")[12:16] == ["--num-classes", "5", "--framework", "pytorch"]
    assert both.read_paths("ddp-unet") == [tmp_path / "mine"] and both.read_paths("ddp-mlp") == []
    with pytest.raises(ConfigError, match=r"benchmark\.models: unet is a pytorch model and benchmark\.frameworks "
                                          r"\(tensorflow\) measure none of that: add pytorch-horovod or pytorch-ddp"):
        benchmark_spec({**section, "user_models": {"unet": torch_unet}})
    with pytest.raises(ConfigError, match=r"benchmark\.user_models\.unet\.framework: 'jax' is not one of tensorflow"):
        benchmark_spec({**section, "user_models": {"unet": {**unet, "framework": "jax"}}})


def test_a_timed_window_shorter_than_min_seconds_gets_a_longer_pass_that_grows_until_it_is_long_enough() -> None:
    # 200 steps of the digits MLP took 67 ms here: 10 s at that rate, and a fifth more for the warm-up's rate
    assert steps_for_window(200, 0.067, 10) == math.ceil(200 * 1.2 * 10 / 0.067)
    assert steps_for_window(200, 10.0, 10) == 0 and steps_for_window(200, 3.0, 0) == 0
    # a pass that fell just short still grows by the margin, so repeated passes end
    assert steps_for_window(1000, 9.99, 10) == 1202
    # passes until one lasts min_seconds: steady steps twice as fast as the warm-up's rate make a second pass
    passes: list[int] = []

    def timed_pass(steps: int) -> float:
        passes.append(steps)
        return steps / 2000  # 2,000 steps/s
    assert long_enough_window(20, 0.02, 1, lambda n: n, timed_pass) == (2400, 1.2)
    assert passes == [1200, 2400]
    assert long_enough_window(20, 1.5, 1, lambda n: n, timed_pass) == (20, 1.5) and len(passes) == 2
    spec = benchmark_spec({"image": "hvdflow-cpu", "models": ["mlp"], "ranks": [1], "allreduce": False})
    assert spec.min_seconds == 5 and spec.program_args("mlp")[-2:] == ["--min-seconds", "5"]


def test_bus_bandwidth_is_nccl_tests_convention_and_iterations_stay_bounded() -> None:
    assert bus_bandwidth(1000, 1.0, 2) == 1000.0
    assert bus_bandwidth(1000, 1.0, 4) == 1500.0
    assert iterations_for(1024) == 50 and iterations_for(64 * 2 ** 20) == 4 and iterations_for(2 ** 30) == 3


def _result(kind: str, ranks: int, runtime: str, rep: int, sps: float, first: float,
            launch: float = 3.0) -> dict[str, Any]:
    result: dict[str, Any] = {"measurement": {"kind": kind, "ranks": ranks, "nodes": 1, "runtime": runtime, "rep": rep},
                              "import_seconds": 2.0, "launch_to_import_seconds": launch}
    if kind.endswith("allreduce"):
        result["allreduce"] = [{"size_bytes": 1024, "bus_bandwidth_bytes_per_second": sps},
                               {"size_bytes": 2 ** 20, "bus_bandwidth_bytes_per_second": 10 * sps}]
        result["tcp"] = {"bytes_per_second": 20 * sps}
    else:
        result.update(samples_per_second=sps, seconds_to_first_step=first)
    return result


RESULTS = [
    _result("mlp", 1, "udocker", 0, 100.0, 10.0), _result("mlp", 1, "udocker", 1, 110.0, 12.0),
    _result("mlp", 2, "udocker", 0, 150.0, 11.0), _result("mlp", 2, "udocker", 1, 170.0, 13.0),
    _result("mlp", 1, "native", 0, 105.0, 9.0), _result("mlp", 1, "native", 1, 105.0, 9.0),
    _result("mlp", 2, "native", 0, 176.0, 10.0), _result("mlp", 2, "native", 1, 176.0, 10.0),
    _result("allreduce", 2, "udocker", 0, 1e6, 0, launch=3.5), _result("allreduce", 2, "native", 0, 2e6, 0),
]


def test_the_table_gives_mean_and_196_sigma_and_scaling_efficiency() -> None:
    assert mean_ci([100.0, 110.0]) == (105.0, pytest.approx(1.96 * math.sqrt(50)))
    assert mean_ci([7.0]) == (7.0, 0.0)
    rows = {(r.kind, r.ranks, r.runtime, r.metric, r.size_bytes): r for r in table_rows(RESULTS)}
    two = rows[("mlp", 2, "udocker", "samples_per_second", 0)]
    assert (two.mean, two.n) == (160.0, 2) and two.ci95 == pytest.approx(1.96 * math.sqrt(200))
    assert rows[("mlp", 2, "udocker", "efficiency", 0)].mean == pytest.approx(160 / (2 * 105))
    assert rows[("mlp", 2, "native", "efficiency", 0)].mean == pytest.approx(176 / (2 * 105))
    assert rows[("mlp", 1, "native", "efficiency", 0)].mean == 1.0
    assert rows[("allreduce", 2, "native", "bus_bandwidth_bytes_per_second", 2 ** 20)].mean == 2e7
    assert rows[("allreduce", 2, "native", "tcp_bytes_per_second", 0)].mean == 4e7
    assert ("allreduce", 2, "native", "efficiency", 0) not in rows


def test_each_goal_is_judged_where_udocker_is_worst_on_paired_repetitions_and_a_miss_says_by_how_much() -> None:
    found = {g.name.split(",")[0]: g for g in goals(RESULTS)}
    steady = found["training time per sample"]
    # 2 ranks: 176/150 and 176/170 in the two repetitions, worse than 1 rank's 105/100 and 105/110
    assert steady.ratio == pytest.approx((176 / 150 + 176 / 170) / 2) and steady.n == 2
    half = 12.706 * statistics.stdev([176 / 150, 176 / 170]) / math.sqrt(2)
    assert (steady.low, steady.high) == (pytest.approx(steady.ratio - half), pytest.approx(steady.ratio + half))
    assert steady.verdict == "unsettled" and not steady.met  # two repetitions this far apart cannot tell
    assert steady.line() == ("training time per sample, udocker/native: 1.104 (95 % interval 0.227-1.981 over 2 paired "
                             "repetitions; goal <= 1.05) NOT SETTLED: the interval spans the goal (more repetitions can "
                             "settle it) [mlp, 2 rank(s) on 1 node(s)]")
    first = found["time to the first step"]
    assert first.ratio == pytest.approx((10 / 9 + 12 / 9) / 2) and first.where == "mlp, 1 rank(s) on 1 node(s)"
    assert found["rank start + TF/Horovod import"].ratio == pytest.approx(3.5 / 3.0)
    bandwidth = found["allreduce bus bandwidth"]
    assert bandwidth.ratio == pytest.approx(0.5) and bandwidth.n == 1 and bandwidth.verdict == "missed"
    assert "0.500 (1 repetition, no interval; goal >= 0.95) MISSED by 47.4 %" in bandwidth.line()
    assert goals([r for r in RESULTS if r["measurement"]["runtime"] == "udocker"]) == []


def test_a_goal_is_met_or_missed_only_beyond_the_repetitions_noise_and_a_slow_repetition_of_both_cancels() -> None:
    # the machine slowed down for repetition 1: both runtimes lost a third, the ratio held
    steady = [_result("mlp", 1, runtime, rep, sps * (2 / 3 if rep == 1 else 1), 10.0)
              for rep in range(3) for runtime, sps in (("udocker-R1", 99.0), ("native", 100.0))]
    goal = {g.name: g for g in goals(steady)}["training time per sample, udocker-R1/native"]
    assert goal.ratio == pytest.approx(100 / 99) and goal.high == pytest.approx(100 / 99) and goal.verdict == "met"
    # the unpaired spread is large: the table's 1.96 sigma of R1 alone spans 30 % of its mean
    r1 = {(r.runtime, r.metric): r for r in table_rows(steady)}[("udocker-R1", "samples_per_second")]
    assert r1.ci95 / r1.mean > 0.3
    slower = [_result("mlp", 1, "udocker-R1", rep, 90.0 + rep, 10.0) for rep in range(3)] + [
        _result("mlp", 1, "native", rep, 100.0, 10.0) for rep in range(3)]
    goal = {g.name: g for g in goals(slower)}["training time per sample, udocker-R1/native"]
    assert goal.low > 1.02 and goal.verdict == "missed" and "MISSED by 7.7 %" in goal.line()
    # repetitions that only one runtime has are not paired
    lone = slower + [_result("mlp", 1, "udocker-R1", 3, 10.0, 10.0)]
    assert {g.name: g for g in goals(lone)}["training time per sample, udocker-R1/native"].n == 3


def test_each_udocker_mode_is_held_to_its_own_goals_side_by_side_with_native() -> None:
    spec = benchmark_spec({"image": "hvdflow-cpu", "models": ["mlp"], "ranks": [1], "allreduce": False,
                           "runtimes": ["udocker-P1", "udocker-R1", "native"], "repetitions": 1})
    assert [m.name for m in spec.measurements()] == ["mlp-r1-n1-udocker-P1-0", "mlp-r1-n1-udocker-R1-0",
                                                     "mlp-r1-n1-native-0"]
    assert re.fullmatch(NAME_PATTERN, "mlp-r1-n1-udocker-R1-0")["runtime"] == "udocker-R1"  # type: ignore[index]
    assert [runtime_kind(r) for r in spec.runtimes] == [("udocker", "P1"), ("udocker", "R1"), ("native", None)]
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    assert schema["properties"]["benchmark"]["properties"]["runtimes"]["items"]["enum"] == list(BENCHMARK_RUNTIMES)
    results = [_result("mlp", 1, "udocker-P1", 0, 90.0, 12.0, launch=5.0),
               _result("mlp", 1, "udocker-R1", 0, 99.0, 10.5, launch=3.2), _result("mlp", 1, "native", 0, 100.0, 10.0)]
    found = {g.name: g for g in goals(results)}
    r1 = found["training time per sample, udocker-R1/native"]
    assert (r1.ratio, r1.limit, r1.met) == (pytest.approx(100 / 99), 1.02, True)
    assert (found["time to the first step, udocker-R1/native"].limit,
            found["time to the first step, udocker-R1/native"].met) == (1.1, True)
    p1 = found["rank start + TF/Horovod import, udocker-P1/native"]
    assert (p1.ratio, p1.limit, p1.met) == (pytest.approx(5 / 3), 1.1, False)  # P1's figures kept beside R1's
    assert found["training time per sample, udocker-P1/native"].limit == 1.05


def test_summary_table_and_figures_are_written(tmp_path: Path) -> None:
    import json

    files = []
    for i, result in enumerate(RESULTS):
        files.append(tmp_path / f"m{i}.json")
        files[-1].write_text(json.dumps(result))
    lines = summarize(files, tmp_path / "table.csv", tmp_path / "summary.json")
    assert any(line.startswith("allreduce/TCP, native, 2 ranks on 1 node(s): 0.500") for line in lines), lines
    header, *body = (tmp_path / "table.csv").read_text().splitlines()
    assert header == "kind,ranks,nodes,runtime,metric,size_bytes,mean,ci95,n" and len(body) == len(read_rows(
        tmp_path / "summary.json"))
    for name in ("throughput", "efficiency", "runtime_ratio", "allreduce", "frameworks"):
        out = tmp_path / f"{name}.png"
        getattr(benchmark_plots, f"plot_{name}")(read_rows(tmp_path / "summary.json"), out)
        assert out.read_bytes().startswith(PNG) and out.stat().st_size > 10_000


def test_the_frameworks_are_set_side_by_side_and_only_a_sweep_with_raw_tcp_is_held_against_it(tmp_path: Path) -> None:
    import json

    torch_sweep = _result("torch-allreduce", 2, "udocker", 0, 4e6, 0)
    del torch_sweep["tcp"]  # PyTorch's sweep streams no raw TCP
    results = RESULTS + [_result("torch-mlp", 2, "udocker", 0, 140.0, 6.0), _result("ddp-mlp", 2, "udocker", 0, 145.0, 5.0),
                         torch_sweep]
    files = []
    for i, result in enumerate(results):
        files.append(tmp_path / f"m{i}.json")
        files[-1].write_text(json.dumps(result))
    lines = summarize(files, tmp_path / "table.csv", tmp_path / "summary.json")
    assert not any(line.startswith("torch-allreduce/TCP") for line in lines), lines
    rows = {(r.kind, r.metric, r.size_bytes): r for r in read_rows(tmp_path / "summary.json")}
    assert rows[("torch-allreduce", "bus_bandwidth_bytes_per_second", 2 ** 20)].mean == 4e7
    assert any(line.startswith("allreduce/TCP, udocker, 2 ranks on 1 node(s): 0.500") for line in lines), lines
    # PyTorch ran in udocker only: no goal of udocker against native is judged on it
    assert all("torch-" not in goal.where and "ddp-" not in goal.where for goal in goals(results))
    out = tmp_path / "frameworks.png"
    benchmark_plots.plot_frameworks(read_rows(tmp_path / "summary.json"), out)
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 10_000
