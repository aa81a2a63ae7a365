"""Test-set metrics of a trained model: accuracy, per-class precision and recall, confusion matrix (JSON)."""

from __future__ import annotations

import argparse
from typing import Dict, List, Optional

from .records import parse_fn, read_index, verified_shards
from .train import write_json


def single_label_metrics(truth: List[int], predicted: List[int], class_names: List[str]) -> Dict[str, object]:
    """Accuracy, per-class precision/recall/support and the confusion matrix (rows: truth, columns: prediction)."""
    n = len(class_names)
    confusion = [[0] * n for _ in range(n)]
    for t, p in zip(truth, predicted):
        confusion[t][p] += 1
    per_class = {}
    for c, name in enumerate(class_names):
        tp = confusion[c][c]
        predicted_c = sum(confusion[r][c] for r in range(n))
        support = sum(confusion[c])
        per_class[name] = {
            "precision": tp / predicted_c if predicted_c else 0.0,
            "recall": tp / support if support else 0.0,
            "support": support,
        }
    correct = sum(confusion[c][c] for c in range(n))
    return {"accuracy": correct / len(truth), "samples": len(truth), "per_class": per_class,
            "confusion_matrix": confusion, "class_names": class_names}


def evaluate(model_path: str, dataset_dir: str, batch_size: int) -> Dict[str, object]:
    """Evaluate the saved model on the dataset's test split (shards verified first)."""
    import numpy as np
    import tensorflow as tf

    index = read_index(dataset_dir)
    if index["task"] != "single-label":
        raise ValueError("evaluate supports single-label datasets; %s is %s" % (dataset_dir, index["task"]))
    paths = verified_shards(dataset_dir, index, "test")
    model = tf.keras.models.load_model(model_path, compile=False)
    data = tf.data.TFRecordDataset(paths).map(parse_fn(index)).batch(batch_size)
    truth: List[int] = []
    predicted: List[int] = []
    for x, y in data:
        truth += [int(v) for v in y.numpy()]
        predicted += [int(v) for v in np.argmax(model(x, training=False).numpy(), axis=1)]
    return single_label_metrics(truth, predicted, list(index["class_names"]))  # type: ignore[call-overload]


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.evaluate --model M --dataset D --out FILE``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    write_json(args.out, evaluate(args.model, args.dataset, args.batch_size))


if __name__ == "__main__":
    main()
