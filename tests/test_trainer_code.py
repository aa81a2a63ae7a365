"""The in-container packages (trainer and index): Python 3.8 grammar (the official Horovod images), pure functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hvdflow_trainer.metrics import single_label_metrics
from hvdflow_trainer.sources.common import split_indices

SRC = Path(__file__).resolve().parents[1] / "src"
CONTAINER_PACKAGES = ("hvdflow_trainer", "hvdflow_index", "hvdflow_runstate")
CONTAINER_CODE = sorted(f for name in CONTAINER_PACKAGES for f in (SRC / name).rglob("*.py"))


@pytest.mark.parametrize("path", CONTAINER_CODE, ids=lambda p: str(p.relative_to(SRC)))
def test_parses_as_python_3_8(path: Path) -> None:
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 8))


def test_metrics_of_a_known_confusion() -> None:
    metrics = single_label_metrics([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], ["a", "b", "c"])
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
