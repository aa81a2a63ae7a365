"""Test-set metrics (checked against hand-computed values) and the per-class figure drawn from them."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hvdflow.pipeline.plots import plot_per_class, wrap_label
from hvdflow_trainer.metrics import average_precision, multi_label_metrics, single_label_metrics
from hvdflow_wire import WireError
from hvdflow_wire.evaluation import read_evaluation
from hvdflow_wire.values import to_json

PNG = b"\x89PNG\r\n\x1a\n"
# 4 samples, 3 classes; class c has no positives but one false positive (sample 1 scores 0.6)
TRUTH = [[1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 0]]
SCORES = [[0.9, 0.2, 0.1], [0.4, 0.7, 0.6], [0.6, 0.8, 0.3], [0.1, 0.3, 0.2]]
LONG_NAME = "Land principally occupied by agriculture, with significant areas of natural vegetation"


@pytest.mark.parametrize(("truth", "scores", "expected"), [
    ([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1], (1 / 2) * 1 + (1 / 2) * (2 / 3)),
    ([1, 1, 0, 0], [0.9, 0.4, 0.6, 0.1], 5 / 6),
    ([0, 1, 1, 0], [0.2, 0.7, 0.8, 0.3], 1.0),
    ([1, 1, 1], [0.1, 0.5, 0.9], 1.0),
    # ties share one threshold: the three samples at 0.5 count together (P = 2/3 at R = 1), whatever their order
    ([1, 0, 1, 0], [0.5, 0.5, 0.5, 0.1], 2 / 3),
    ([0, 1], [0.5, 0.5], 1 / 2),
    # thresholds 0.8 (P 1/2, R 1/3), 0.4 (P 2/3, R 2/3), 0.2 (P 3/4, R 1)
    ([1, 0, 1, 1], [0.8, 0.8, 0.4, 0.2], (1 / 3) * (1 / 2 + 2 / 3 + 3 / 4)),
])
def test_average_precision_of_known_rankings(truth: list[int], scores: list[float], expected: float) -> None:
    assert average_precision(truth, scores) == pytest.approx(expected, abs=1e-12)


def test_average_precision_of_a_class_without_positives_is_none() -> None:
    assert average_precision([0, 0, 0], [0.9, 0.5, 0.1]) is None


def test_multi_label_metrics_of_a_known_example() -> None:
    metrics = to_json(multi_label_metrics(TRUTH, SCORES, ["a", "b", "c"]))
    # a: tp 1 (sample 0), fp 1 (sample 2), fn 1 (sample 1); b: tp 2; c: fp 1 only
    assert metrics["per_class"] == {
        "a": {"precision": 0.5, "recall": 0.5, "f1": 0.5, "average_precision": pytest.approx(5 / 6), "support": 2},
        "b": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "average_precision": 1.0, "support": 2},
        "c": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "average_precision": None, "support": 0},
    }
    # micro: tp 3, fp 2, fn 1
    assert metrics["micro"] == pytest.approx({"precision": 3 / 5, "recall": 3 / 4, "f1": 6 / 9})
    # macro over all three classes, c counting 0 (zero_division=0)
    assert metrics["macro"] == pytest.approx({"precision": 1.5 / 3, "recall": 1.5 / 3, "f1": 1.5 / 3})
    # mean over a and b only (c has no positives)
    assert metrics["mean_average_precision"] == pytest.approx((5 / 6 + 1) / 2)
    # flattened: 0.9+ 0.8+ 0.7+ 0.6- 0.6- 0.4+ ...: AP = 3/4 * 1 + 1/4 * 4/6
    assert metrics["micro_average_precision"] == pytest.approx(3 / 4 + 1 / 6)
    # samples 0 and 3 are predicted exactly
    assert metrics["subset_accuracy"] == 0.5
    assert (metrics["task"], metrics["samples"], metrics["threshold"]) == ("multi-label", 4, 0.5)
    assert metrics["class_names"] == ["a", "b", "c"]


def test_multi_label_metrics_are_plain_json_values() -> None:
    import numpy as np

    metrics = to_json(multi_label_metrics(np.array(TRUTH, dtype="float32"), np.array(SCORES, dtype="float32"),
                                          ["a", "b", "c"]))
    assert json.loads(json.dumps(metrics)) == metrics
    values = [metrics["micro"]["f1"], metrics["macro"]["f1"], metrics["per_class"]["a"]["average_precision"],
              metrics["mean_average_precision"], metrics["micro_average_precision"], metrics["subset_accuracy"]]
    assert all(type(value) is float for value in values)
    assert type(metrics["per_class"]["a"]["support"]) is int and type(metrics["samples"]) is int


def test_the_threshold_decides_the_predictions() -> None:
    metrics = multi_label_metrics(TRUTH, SCORES, ["a", "b", "c"], threshold=0.65)
    # a: only sample 0 (0.9) is predicted, b: samples 1 and 2, c: none
    assert metrics.per_class["a"].precision == 1.0 and metrics.per_class["a"].recall == 0.5
    assert to_json(metrics.micro) == pytest.approx({"precision": 1.0, "recall": 3 / 4, "f1": 6 / 7})
    assert metrics.subset_accuracy == 0.75


def test_multi_label_metrics_check_shapes() -> None:
    with pytest.raises(ValueError, match="must both be"):
        multi_label_metrics(TRUTH, SCORES, ["a", "b"])


def test_evaluation_json_is_written_and_read_back_as_its_task_says(tmp_path: Path) -> None:
    single = single_label_metrics([0, 1, 1], [0, 1, 0], ["a", "b"])
    multi = multi_label_metrics(TRUTH, SCORES, ["a", "b", "c"])
    for name, evaluation in (("single", single), ("multi", multi)):
        evaluation.write(str(tmp_path / f"{name}.json"))
        assert read_evaluation(str(tmp_path / f"{name}.json")) == evaluation
    written = json.loads((tmp_path / "single.json").read_text())
    assert written["task"] == "single-label" and written["confusion_matrix"] == [[1, 0], [1, 1]]
    assert written["per_class"]["b"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}
    assert json.loads((tmp_path / "multi.json").read_text())["task"] == "multi-label"
    # a file of another task, or one a key short, is named with what is wrong
    (tmp_path / "bad.json").write_text(json.dumps({**written, "task": "regression"}))
    with pytest.raises(WireError, match=r"bad\.json: task is 'regression', expected one of single-label, multi-label"):
        read_evaluation(str(tmp_path / "bad.json"))
    (tmp_path / "short.json").write_text(json.dumps({k: v for k, v in written.items() if k != "macro_f1"}))
    with pytest.raises(WireError, match=r"short\.json: missing macro_f1"):
        read_evaluation(str(tmp_path / "short.json"))


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file, from its header."""
    data = path.read_bytes()
    assert data.startswith(PNG)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_long_class_names_are_wrapped_and_shortened() -> None:
    label = wrap_label(LONG_NAME)
    assert len(label.splitlines()) == 2 and label.endswith("…")
    assert all(len(line) <= 36 for line in label.splitlines())
    assert wrap_label("forest") == "forest"


def test_per_class_plots_of_both_tasks(tmp_path: Path) -> None:
    names = ["a", LONG_NAME, "c"]
    multi = tmp_path / "multi.json"
    multi_label_metrics(TRUTH, SCORES, names).write(str(multi))
    single = tmp_path / "single.json"
    single_label_metrics([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], names).write(str(single))
    many = tmp_path / "many.json"
    single_label_metrics(list(range(19)), list(range(19)), [f"class {i}" for i in range(19)]).write(str(many))
    sizes = {}
    for evaluation in (multi, single, many):
        out = tmp_path / "plots" / f"{evaluation.stem}.png"
        plot_per_class(evaluation, out, "demo")
        sizes[evaluation.stem] = png_size(out)
    assert sizes["many"][1] > sizes["single"][1]
