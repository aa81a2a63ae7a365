"""The in-container packages (trainer and index): Python 3.8 grammar (the official Horovod images), pure functions."""

from __future__ import annotations

import argparse
import ast
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from hvdflow_trainer.metrics import single_label_metrics
from hvdflow_trainer.sources.common import split_indices
from hvdflow_wire.values import to_json

SRC = Path(__file__).resolve().parents[1] / "src"
CONTAINER_PACKAGES = ("hvdflow_trainer", "hvdflow_index", "hvdflow_runstate", "hvdflow_wire")
CONTAINER_CODE = sorted(f for name in CONTAINER_PACKAGES for f in (SRC / name).rglob("*.py"))


@pytest.mark.parametrize("path", CONTAINER_CODE, ids=lambda p: str(p.relative_to(SRC)))
def test_parses_as_python_3_8(path: Path) -> None:
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_metrics_of_a_known_confusion() -> None:
    metrics = to_json(single_label_metrics([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], ["a", "b", "c"]))
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    assert metrics["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 0]]
    assert metrics["per_class"]["a"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert metrics["per_class"]["b"] == {"precision": pytest.approx(2 / 3), "recall": 1.0, "f1": pytest.approx(4 / 5),
                                         "support": 2}
    assert metrics["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert metrics["macro_f1"] == pytest.approx((0.5 + 4 / 5 + 0.0) / 3)


def test_split_is_seeded_disjoint_and_complete() -> None:
    first = split_indices(100, 0.1, 0.2, seed=42)
    assert first == split_indices(100, 0.1, 0.2, seed=42)
    assert first != split_indices(100, 0.1, 0.2, seed=43)
    assert [len(first[k]) for k in ("train", "validation", "test")] == [70, 10, 20]
    assert sorted(first["train"] + first["validation"] + first["test"]) == list(range(100))


def test_split_fractions_are_checked() -> None:
    with pytest.raises(ValueError, match="must be in"):
        split_indices(10, 0.6, 0.5, seed=1)


def test_a_rank_uses_the_one_gpu_it_sees_or_its_local_ranks() -> None:
    from hvdflow_trainer.placement import pick_gpu

    assert pick_gpu(["gpu:0"], 3) == "gpu:0"  # its launcher narrowed the list to its own
    assert pick_gpu(["gpu:0", "gpu:1"], 1) == "gpu:1"
    with pytest.raises(RuntimeError, match="local rank 2 sees 2 GPUs and none of its own"):
        pick_gpu(["gpu:0", "gpu:1"], 2)


def test_an_epochs_shuffle_seed_depends_only_on_the_seed_and_the_epoch() -> None:
    from hvdflow_trainer.input_plan import epoch_seed

    seeds = [epoch_seed(1234, epoch) for epoch in range(100)]
    assert len(set(seeds)) == 100 and seeds == [epoch_seed(1234, epoch) for epoch in range(100)]
    assert all(0 <= s < 2 ** 31 - 1 for s in seeds) and epoch_seed(1235, 0) not in seeds


@pytest.mark.parametrize("text, args", [
    ("1:2", ["--fail-rank", "1", "--fail-epoch", "2", "--fail-step", "0", "--fail-how", "exit"]),
    ("1:3.5:kill:once", ["--fail-rank", "1", "--fail-epoch", "3", "--fail-step", "5", "--fail-how", "kill",
                         "--fail-once"]),
    ("0:4.4:signal", ["--fail-rank", "0", "--fail-epoch", "4", "--fail-step", "4", "--fail-how", "signal"]),
])
def test_injected_failures_are_read(text: str, args: list[str]) -> None:
    from hvdflow.launch.faults import trainer_args

    assert trainer_args(text) == args


@pytest.mark.parametrize("name, argv", [
    ("TrainOptions", ["--dataset", "d", "--out", "o", "--checkpoint-dir", "c", "--identity", "i", "--framework",
                      "pytorch", "--distributed", "ddp", "--model-code", "m", "--model-build", "net:build"]),
    ("BenchmarkOptions", ["--out", "o", "--kind", "allreduce", "--launched", "1.5", "--sizes-kib", "1", "2"]),
    ("CheckModelOptions", ["--dataset", "d", "--out", "o", "--model-code", "m", "--model-script", "train.py"]),
    ("EvaluateOptions", ["--model", "m", "--dataset", "d", "--out", "o", "--batch-size", "8"]),
    ("ElasticDriverOptions", ["--channel", "c", "--address", "10.0.0.1", "--iface", "lo", "--ranks", "2",
                              "--min-ranks", "1", "--max-ranks", "3"]),
])
def test_every_entry_points_command_line_is_read_once_into_its_typed_options(name: str, argv: list[str]) -> None:
    import dataclasses

    from hvdflow_trainer import options

    cls = getattr(options, name)
    parsed = cls.parse(argv)
    namespace = vars(cls.parser().parse_args(argv))
    assert type(parsed) is cls and dataclasses.asdict(parsed) == namespace
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.out = "elsewhere"

    @dataclasses.dataclass(frozen=True)
    class Narrower(cls):  # type: ignore[misc,valid-type]
        """A parser with an option its value has no field for."""

        @classmethod
        def parser(cls) -> argparse.ArgumentParser:
            parser = super().parser()
            parser.add_argument("--unheard-of", default="")
            return parser

    with pytest.raises(TypeError, match=r"Narrower and its parser disagree: \['unheard_of'\]"):
        Narrower.parse(argv)


def test_several_injected_failures_fail_in_turn_each_once() -> None:
    from hvdflow.errors import LaunchError
    from hvdflow.launch.faults import trainer_args
    from hvdflow_trainer import faults
    from hvdflow_trainer.options import TrainOptions

    required = ["--dataset", "d", "--out", "o", "--checkpoint-dir", "/ckpt", "--identity", "i"]
    args = TrainOptions.parse(required + trainer_args("1:2.4:kill:once,0:3.3:signal:once"))
    failures = faults.injected_failures(args)
    assert [(f.rank, f.epoch, f.step, f.how, f.marker) for f in failures] == [
        (1, 2, 4, "kill", "/ckpt/.injected-failure"), (0, 3, 3, "signal", "/ckpt/.injected-failure-1")]
    assert faults.injected_failures(TrainOptions.parse(required)) == []
    with pytest.raises(LaunchError, match="say once for all of them or for none"):
        trainer_args("1:2:kill:once,0:3:signal")


def test_slowed_steps_sleep_after_every_step_and_a_bad_value_is_named() -> None:
    import time

    from hvdflow.errors import LaunchError
    from hvdflow.launch.faults import trainer_args
    from hvdflow_trainer import faults
    from hvdflow_trainer.options import TrainOptions

    required = ["--dataset", "d", "--out", "o", "--checkpoint-dir", "/ckpt", "--identity", "i"]
    args = TrainOptions.parse(required + trainer_args("1:2", "0.05"))
    slow, failure = faults.injected_failures(args)
    assert isinstance(slow, faults.SlowSteps) and slow.seconds == 0.05 and failure.rank == 1
    started = time.monotonic()
    for step in range(1, 5):
        slow.after_step(0, 0, step)
    assert time.monotonic() - started >= 4 * 0.05
    for bad in ("-1", "soon", "4000"):
        with pytest.raises(LaunchError, match=rf"HVDFLOW_INJECT_SLOW_STEPS='{bad}': say a number of seconds"):
            trainer_args(None, bad)


def test_ranks_that_disagree_are_told_which_variables_differ_and_why() -> None:
    from hvdflow_trainer.script_run import ranks_disagree

    same = [("dense/kernel:0", "a", True), ("bn/moving_mean:0", "b", False)]
    assert ranks_disagree([same, list(same)]) is None
    said = ranks_disagree([same, [("dense/kernel:0", "x", True), ("bn/moving_mean:0", "y", False)]])
    assert said is not None and said.startswith("the ranks ended with different models: trainable dense/kernel:0: "
                                                "their gradients were not averaged over the ranks")
    assert "non-trainable bn/moving_mean:0: run.validate and run.end_epoch average such state" in said
    only_state = ranks_disagree([same, [same[0], ("bn/moving_mean:0", "y", False)]])
    assert only_state is not None and "trainable dense" not in only_state and "bn/moving_mean:0" in only_state


def test_a_rank_that_has_ended_ignores_stop_signals_through_its_exit() -> None:
    """Python puts its handlers back to the default action as it exits; a Ctrl-C repeated by the launcher then
    killed a rank that had already stopped with 75 (130, seen in the suite). After ``ignore`` the signal is ignored
    at the OS level, which the interpreter's exit leaves in place: the status stays the rank's own."""
    code = ("import os, signal, sys\n"
            "from hvdflow_trainer.run_control import StopFlag\n"
            "flag = StopFlag(); flag.install()\n"
            "if sys.argv[1] == 'ignore': flag.ignore()\n"
            "signal.signal(signal.SIGINT, signal.SIG_DFL) if sys.argv[1] == 'default' else None\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "sys.exit(75)\n")
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    ignored = subprocess.run([sys.executable, "-c", code, "ignore"], env=env, capture_output=True, timeout=60)
    assert ignored.returncode == 75, ignored.stderr
    default = subprocess.run([sys.executable, "-c", code, "default"], env=env, capture_output=True, timeout=60)
    assert default.returncode == -signal.SIGINT   # what the exit's default disposition does to a late Ctrl-C


def test_a_rank_leaving_by_os_exit_keeps_the_status_sys_exit_would_give() -> None:
    from hvdflow_trainer.rank_exit import exit_status, gloo_group_alive

    assert [exit_status(None), exit_status(0), exit_status(75)] == [0, 0, 75]
    proc = subprocess.run([sys.executable, "-c", "from hvdflow_trainer.rank_exit import exit_status; "
                           "import sys; sys.exit(exit_status('bad config'))"],
                          cwd=REPO / "src", capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (1, "bad config\n")
    assert not gloo_group_alive()  # no torch.distributed in this process: the trainer ends as Python ends it
