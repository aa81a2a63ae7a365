"""Test-set metrics in pure numpy, defined as scikit-learn defines them, returned as the typed values of
``evaluation.json`` (:mod:`hvdflow_wire.evaluation`).

Single-label: accuracy, per-class precision, recall and F1, macro F1 and the confusion matrix. Multi-label: micro and
macro precision, recall and F1 at a score threshold, per-class average precision (AP), their mean (mAP), micro AP and
subset accuracy. A ratio with a zero denominator is 0 (scikit-learn's ``zero_division=0``).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import numpy.typing as npt

from hvdflow_wire.evaluation import ClassScores, LabelScores, MultiLabelEvaluation, Scores, SingleLabelEvaluation


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` as a float, 0.0 when the denominator is 0."""
    return float(numerator) / float(denominator) if denominator else 0.0


def _mean(values: List[float]) -> float:
    """The mean as numpy (and so scikit-learn's macro average) computes it, as a float."""
    return float(np.mean(values))


def _scores(tp: int, fp: int, fn: int) -> Scores:
    """Precision, recall and F1 (``2tp / (2tp + fp + fn)``) from counts."""
    return Scores(_ratio(tp, tp + fp), _ratio(tp, tp + fn), _ratio(2 * tp, 2 * tp + fp + fn))


def single_label_metrics(truth: List[int], predicted: List[int], class_names: List[str]) -> SingleLabelEvaluation:
    """Accuracy, per-class precision/recall/F1/support, macro F1 and the confusion matrix (rows: truth)."""
    n = len(class_names)
    confusion = [[0] * n for _ in range(n)]
    for t, p in zip(truth, predicted):
        confusion[t][p] += 1
    per_class: Dict[str, ClassScores] = {}
    for c, name in enumerate(class_names):
        tp = confusion[c][c]
        support = sum(confusion[c])
        fp = sum(confusion[r][c] for r in range(n)) - tp
        scores = _scores(tp, fp, support - tp)
        per_class[name] = ClassScores(scores.precision, scores.recall, scores.f1, support=support)
    correct = sum(confusion[c][c] for c in range(n))
    return SingleLabelEvaluation(accuracy=correct / len(truth), samples=len(truth), per_class=per_class,
                                 macro_f1=_mean([m.f1 for m in per_class.values()]), confusion_matrix=confusion,
                                 class_names=class_names)


def average_precision(truth_column: npt.ArrayLike, score_column: npt.ArrayLike) -> Optional[float]:
    """scikit-learn's ``average_precision_score`` of one class; None when the class has no positives.

    AP = sum_n (R_n - R_(n-1)) P_n over the distinct scores n in descending order (tied samples share a threshold).
    """
    truth = np.asarray(truth_column).astype(bool)
    scores = np.asarray(score_column, dtype=np.float64)
    if not truth.any():
        return None
    order = np.argsort(-scores, kind="mergesort")
    scores, truth = scores[order], truth[order]
    last_of_each_score = np.r_[np.flatnonzero(np.diff(scores)), scores.size - 1]
    tps = np.cumsum(truth)[last_of_each_score].astype(np.float64)
    precision = tps / (last_of_each_score + 1)
    recall = tps / tps[-1]
    # summed from the lowest threshold up, as scikit-learn does: the same float, not just a close one
    return float(np.sum((np.diff(np.r_[0.0, recall]) * precision)[::-1]))


def multi_label_metrics(truth: npt.ArrayLike, scores: npt.ArrayLike, class_names: List[str],
                        threshold: float = 0.5) -> MultiLabelEvaluation:
    """Micro/macro precision, recall and F1 of ``scores > threshold``, per-class and mean AP, subset accuracy.

    ``truth`` is a 0/1 (samples x classes) array and ``scores`` the model's sigmoid outputs of the same shape. The
    macro means run over all classes (F1 as scikit-learn's ``f1_score(average="macro", zero_division=0)``); the
    mean average precision runs over the classes with at least one positive (None if none has).
    """
    actual = np.asarray(truth).astype(bool)
    values = np.asarray(scores, dtype=np.float64)
    if actual.ndim != 2 or actual.shape != values.shape or actual.shape[1] != len(class_names):
        raise ValueError("truth %s and scores %s must both be (samples, %d classes)"
                         % (actual.shape, values.shape, len(class_names)))
    predicted = values > threshold
    tp = np.sum(actual & predicted, axis=0)
    fp = np.sum(~actual & predicted, axis=0)
    fn = np.sum(actual & ~predicted, axis=0)
    per_class: Dict[str, LabelScores] = {}
    for c, name in enumerate(class_names):
        scores = _scores(int(tp[c]), int(fp[c]), int(fn[c]))
        per_class[name] = LabelScores(scores.precision, scores.recall, scores.f1, support=int(tp[c] + fn[c]),
                                      average_precision=average_precision(actual[:, c], values[:, c]))
    aps = [m.average_precision for m in per_class.values() if m.average_precision is not None]
    return MultiLabelEvaluation(
        samples=int(actual.shape[0]),
        class_names=class_names,
        threshold=float(threshold),
        micro=_scores(int(tp.sum()), int(fp.sum()), int(fn.sum())),
        macro=Scores(*(_mean([getattr(m, key) for m in per_class.values()]) for key in ("precision", "recall", "f1"))),
        per_class=per_class,
        mean_average_precision=_mean(aps) if aps else None,
        micro_average_precision=average_precision(actual.ravel(), values.ravel()),
        subset_accuracy=_ratio(int(np.sum(np.all(actual == predicted, axis=1))), actual.shape[0]),
    )
