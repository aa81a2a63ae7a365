"""Report figures drawn on the host with matplotlib: learning curves, an elastic run's membership, test-set confusion
matrix, per-class scores."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import matplotlib

from hvdflow_wire.evaluation import Evaluation, MultiLabelEvaluation, SingleLabelEvaluation, read_evaluation

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_history(path: Path) -> dict[str, list[float]]:
    """Columns of a Keras CSVLogger file, by name."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise ValueError(f"{path} has no epochs")
    return {key: [float(row[key]) for row in rows] for key in rows[0]}


def save(fig: plt.Figure, out: Path) -> None:
    """Lay out ``fig``, write it to ``out`` as PNG (creating the folder) and release it."""
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


COMMUNICATION = (("consensus_distance", "consensus distance (L2 from the ranks' mean)", 1.0),
                 ("sent_bytes_per_step", "MiB sent per step and rank", 1 / 2 ** 20))
"""The communication columns of the trainer's history: column, axis label, scale."""


def plot_learning_curves(history_csv: Path, out: Path, title: str) -> None:
    """Loss and accuracy per epoch, training and validation, side by side; then, where the history has them, the
    consensus distance of the ranks' models and the bytes each rank sent per step."""
    history = read_history(history_csv)
    epochs = [int(e) + 1 for e in history["epoch"]]
    communication = [c for c in COMMUNICATION if c[0] in history]
    fig, axes = plt.subplots(1, 2 + len(communication), figsize=(5 * (2 + len(communication)), 4))
    for ax, metric in zip(axes, ("loss", "accuracy")):
        ax.plot(epochs, history[metric], marker="o", label="training")
        ax.plot(epochs, history[f"val_{metric}"], marker="s", label="validation")
        ax.set_ylabel(metric)
        ax.legend()
    for ax, (column, label, scale) in zip(axes[2:], communication):
        ax.plot(epochs, [v * scale for v in history[column]], marker="o", color="tab:green")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: learning curves")
    save(fig, out)


def plot_membership(record_json: Path, out: Path, title: str) -> None:
    """An elastic run's rank count over time (each change marked with its epoch) and each epoch's throughput
    (samples per second of wall time, at the epoch's end), from the run record's ``elastic`` section."""
    record = json.loads(record_json.read_text())
    elastic = record["elastic"]
    memberships, epochs = elastic["memberships"], elastic["epochs"]
    end = max([m["seconds"] for m in memberships] + [e["seconds"] for e in epochs])
    fig, (count, rate) = plt.subplots(1, 2, figsize=(10, 4))
    times = [m["seconds"] for m in memberships] + [end]
    ranks = [m["ranks"] for m in memberships]
    count.step(times, ranks + ranks[-1:], where="post", color="tab:blue")
    for m in memberships:
        count.annotate(f"epoch {m['epoch']}", (m["seconds"], m["ranks"]), textcoords="offset points", xytext=(3, 4),
                       fontsize=8)
    count.set_ylim(0, elastic["max_ranks"] + 1)
    count.set_ylabel("ranks")
    rate.plot([e["seconds"] for e in epochs], [e["samples"] / e["epoch_seconds"] for e in epochs], marker="o",
              color="tab:green")
    rate.set_ylabel("samples per second (epoch)")
    rate.set_ylim(bottom=0)
    for ax in (count, rate):
        ax.set_xlabel("seconds since the launch")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title}: elastic membership (min {elastic['min_ranks']}, max {elastic['max_ranks']} ranks)")
    save(fig, out)

def plot_allocation(record_json: Path, out: Path, title: str) -> None:
    """How the run used its allocation (:mod:`.verdict`): each rank's CPU use of its cores and its resident memory
    over time (the usage samples), and the ranks' step time per epoch split into input, compute and communication;
    the verdict as the title."""
    from .verdict import PARTS, allocation_verdict, epoch_sums

    record = json.loads(record_json.read_text())
    verdict = allocation_verdict(record)
    fig, (cpu, memory, split) = plt.subplots(1, 3, figsize=(15, 4))
    for rank in record["ranks"]:
        samples = (rank.get("usage") or {}).get("samples") or []
        if samples:
            label = f"rank {rank['rank']} ({rank['hostname']})"
            cpu.plot([s[0] for s in samples], [100 * s[1] for s in samples], marker=".", label=label)
            memory.plot([s[0] for s in samples], [s[2] for s in samples], marker=".", label=label)
    cpu.set_ylabel("CPU use of the rank's cores (%)")
    memory.set_ylabel("resident memory (MiB)")
    for ax in (cpu, memory):
        ax.set_xlabel("seconds since the rank's start")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    sums = epoch_sums(record)
    epochs = list(sums)
    bottom = [0.0] * len(epochs)
    for k, part in enumerate(PARTS):
        shares = [100 * sums[e][1][k] / (sum(sums[e][1]) or 1.0) for e in epochs]
        split.bar(epochs, shares, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, shares)]
    split.set_xlabel("epoch")
    split.set_ylabel("share of the ranks' step time (%)")
    split.set_ylim(0, 100)
    if epochs:
        split.legend(fontsize=8)
    else:
        split.text(0.5, 0.5, "steps not timed", ha="center", transform=split.transAxes)
    fig.suptitle(f"{title}: {wrap_label(verdict.line, 150, 2)}", fontsize=9)
    save(fig, out)


def plot_confusion_matrix(evaluation_json: Path, out: Path, title: str) -> None:
    """The confusion matrix with counts, and per-class precision and recall beside it."""
    evaluation = read_evaluation(str(evaluation_json))
    if not isinstance(evaluation, SingleLabelEvaluation):
        raise ValueError(f"{evaluation_json}: a confusion matrix is drawn for a single-label task's evaluation")
    names = evaluation.class_names
    matrix = evaluation.confusion_matrix
    fig, (ax, table_ax) = plt.subplots(1, 2, figsize=(11, 5), gridspec_kw={"width_ratios": [3, 2]})
    image = ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    peak = max(max(row) for row in matrix) or 1
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            ax.text(j, i, str(count), ha="center", va="center", color="white" if count > peak / 2 else "black", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.046)
    cells = [[name, f"{m.precision:.3f}", f"{m.recall:.3f}", str(m.support)] for name, m in evaluation.per_class.items()]
    table_ax.axis("off")
    table_ax.table(cellText=cells, colLabels=["class", "precision", "recall", "support"], loc="center")
    table_ax.set_title(f"test accuracy {evaluation.accuracy:.4f} on {evaluation.samples} samples")
    fig.suptitle(f"{title}: test set")
    save(fig, out)


def wrap_label(name: str, width: int = 36, lines: int = 2) -> str:
    """A class name wrapped to at most ``lines`` lines of ``width`` characters, shortened with an ellipsis."""
    return "\n".join(textwrap.wrap(name, width=width, max_lines=lines, placeholder=" …"))


def per_class_series(evaluation: Evaluation) -> tuple[dict[str, list[float | None]], str]:
    """The per-class scores to draw, by legend label and in class order (None: undefined), and a summary line."""
    per_class = [evaluation.per_class[name] for name in evaluation.class_names]
    if isinstance(evaluation, MultiLabelEvaluation):
        mean_ap = evaluation.mean_average_precision
        summary = (f"micro F1 {evaluation.micro.f1:.3f}, macro F1 {evaluation.macro.f1:.3f}, "
                   f"mAP {'n/a' if mean_ap is None else format(mean_ap, '.3f')}")
        keys = {"F1": "f1", "average precision": "average_precision"}
    else:
        summary = f"accuracy {evaluation.accuracy:.3f}, macro F1 {evaluation.macro_f1:.3f}"
        keys = {"precision": "precision", "recall": "recall", "F1": "f1"}
    return {label: [getattr(scores, key) for scores in per_class] for label, key in keys.items()}, summary


def plot_per_class(evaluation_json: Path, out: Path, title: str) -> None:
    """Per-class test scores as horizontal bars, one row per class, the figure as tall as the classes need.

    Multi-label: F1 and average precision (n/a for a class without positives), micro/macro F1 and mAP in the title.
    Single-label: precision, recall and F1, accuracy and macro F1 in the title.
    """
    evaluation = read_evaluation(str(evaluation_json))
    series, summary = per_class_series(evaluation)
    names = evaluation.class_names
    bar = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10, max(3.0, 1.5 + 0.2 * (len(series) + 1) * len(names))))
    for k, (label, values) in enumerate(series.items()):
        rows = [row + (k - (len(series) - 1) / 2) * bar for row in range(len(names))]
        drawn = [(y, value) for y, value in zip(rows, values) if value is not None]
        ax.barh([y for y, _ in drawn], [value for _, value in drawn], height=bar, color=f"C{k}", label=label)
        for y, value in zip(rows, values):
            if value is None:
                ax.text(0.01, y, "n/a", va="center", fontsize=7, color=f"C{k}")
            else:
                ax.text(value + 0.01, y, f"{value:.2f}", va="center", fontsize=7)
    ax.set_yticks(range(len(names)), [wrap_label(name) for name in names], fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel("score")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(series), frameon=False, fontsize=8)
    fig.suptitle(f"{title}: per-class scores on the test set ({evaluation.samples} samples)\n{summary}", fontsize=10)
    save(fig, out)
