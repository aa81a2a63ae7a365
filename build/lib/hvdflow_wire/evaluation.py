"""A trained model's test-set scores (``evaluation.json`` in the experiment's results): written by the trainer's
``evaluate`` step (:mod:`hvdflow_trainer.metrics` computes them), read on the host by the report's figures
(:mod:`hvdflow.pipeline.plots`). One of two values, told apart by the file's ``task``: :class:`SingleLabelEvaluation`
or :class:`MultiLabelEvaluation`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional, Tuple, Union

from .values import WireError, from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class Scores:
    """Precision, recall and F1 (0 where undefined, as scikit-learn's ``zero_division=0``)."""

    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class ClassScores(Scores):
    """One class's scores and its support (samples whose truth is the class)."""

    support: int


@dataclass(frozen=True)
class LabelScores(ClassScores):
    """One label's scores, support and average precision (None: the label has no positive sample)."""

    average_precision: Optional[float]


@dataclass(frozen=True)
class SingleLabelEvaluation:
    """A single-label task's accuracy, per-class scores, macro F1 and confusion matrix (rows: truth, columns:
    prediction, in ``class_names``' order)."""

    TAG: ClassVar[Tuple[str, str]] = ("task", "single-label")
    accuracy: float
    samples: int
    per_class: Dict[str, ClassScores]
    macro_f1: float
    confusion_matrix: List[List[int]]
    class_names: List[str]

    def write(self, path: str) -> None:
        """Write ``evaluation.json`` atomically."""
        write_object(str(path), to_json(self))


@dataclass(frozen=True)
class MultiLabelEvaluation:
    """A multi-label task's scores of ``scores > threshold``: micro and macro, per label, the mean average precision
    over the labels with a positive (None where none has), the flattened one, and the subset accuracy."""

    TAG: ClassVar[Tuple[str, str]] = ("task", "multi-label")
    samples: int
    class_names: List[str]
    threshold: float
    micro: Scores
    macro: Scores
    per_class: Dict[str, LabelScores]
    mean_average_precision: Optional[float]
    micro_average_precision: Optional[float]
    subset_accuracy: float

    def write(self, path: str) -> None:
        """Write ``evaluation.json`` atomically."""
        write_object(str(path), to_json(self))


Evaluation = Union[SingleLabelEvaluation, MultiLabelEvaluation]
TASKS = {cls.TAG[1]: cls for cls in (SingleLabelEvaluation, MultiLabelEvaluation)}


def read_evaluation(path: str) -> Evaluation:
    """The evaluation in ``path``; WireError naming the file and what is wrong (an unknown ``task`` included)."""
    data = read_object(str(path))
    task = data.get("task")
    if task not in TASKS:
        raise WireError("%s: task is %r, expected one of %s" % (path, task, ", ".join(TASKS)))
    return from_json(TASKS[task], data, str(path))
