"""Report figures drawn on the host with matplotlib: learning curves and the test-set confusion matrix."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_history(path: Path) -> dict[str, list[float]]:
    """Columns of a Keras CSVLogger file, by name."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise ValueError(f"{path} has no epochs")
    return {key: [float(row[key]) for row in rows] for key in rows[0]}


def plot_learning_curves(history_csv: Path, out: Path, title: str) -> None:
    """Loss and accuracy per epoch, training and validation, side by side."""
    history = read_history(history_csv)
    epochs = [int(e) + 1 for e in history["epoch"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("loss", "accuracy")):
        ax.plot(epochs, history[metric], marker="o", label="training")
        ax.plot(epochs, history[f"val_{metric}"], marker="s", label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{title}: learning curves")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def plot_confusion_matrix(evaluation_json: Path, out: Path, title: str) -> None:
    """The confusion matrix with counts, and per-class precision and recall beside it."""
    evaluation = json.loads(evaluation_json.read_text())
    names = evaluation["class_names"]
    matrix = evaluation["confusion_matrix"]
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
    cells = [[name, f"{m['precision']:.3f}", f"{m['recall']:.3f}", str(m["support"])]
             for name, m in evaluation["per_class"].items()]
    table_ax.axis("off")
    table_ax.table(cellText=cells, colLabels=["class", "precision", "recall", "support"], loc="center")
    table_ax.set_title(f"test accuracy {evaluation['accuracy']:.4f} on {evaluation['samples']} samples")
    fig.suptitle(f"{title}: test set")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
