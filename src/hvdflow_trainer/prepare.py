"""Prepare a dataset into sharded TFRecords with a seeded train/validation/test split.

Sources: ``sklearn-digits``, scikit-learn's 8x8 handwritten digits (1,797 real samples that ship inside the
package, so the demo runs offline). The output directory gets the shards first and ``index.json`` last.
"""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Dict, List, Optional, Tuple

from .records import FORMAT, write_index, write_shards

SOURCES = ("sklearn-digits",)


def load_source(source: str):  # type: ignore[no-untyped-def]
    """``(features, labels, class_names, feature_shape, task)`` of a built-in source."""
    if source == "sklearn-digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        features = (digits.images / 16.0).astype("float32")[..., None]  # 8x8x1, values in [0, 1]
        return features, digits.target.astype("int64"), [str(c) for c in digits.target_names], [8, 8, 1], "single-label"
    raise ValueError("unknown source %r; known: %s" % (source, ", ".join(SOURCES)))


def split_indices(count: int, validation: float, test: float, seed: int) -> Dict[str, List[int]]:
    """A seeded permutation of ``range(count)`` cut into train, validation and test."""
    import numpy as np

    if not (0 <= validation < 1 and 0 <= test < 1 and validation + test < 1):
        raise ValueError("validation (%s) and test (%s) fractions must be in [0, 1) and sum below 1" % (validation, test))
    order = np.random.RandomState(seed).permutation(count).tolist()
    n_test, n_val = int(round(count * test)), int(round(count * validation))
    return {"test": order[:n_test], "validation": order[n_test:n_test + n_val], "train": order[n_test + n_val:]}


def prepare(source: str, out_dir: str, validation: float, test: float, seed: int, shard_records: int) -> Dict[str, object]:
    """Write the shards and the index of ``source`` into ``out_dir`` (replaced if it exists); return the index."""
    features, labels, class_names, shape, task = load_source(source)
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    splits: Dict[str, object] = {}
    for split, indices in split_indices(len(labels), validation, test, seed).items():
        samples = ((features[i], [labels[i]]) for i in indices)
        shards = write_shards(out_dir, split, samples, shard_records, len(indices))
        splits[split] = {"records": len(indices), "shards": shards}
    index = {
        "format": FORMAT,
        "dataset": source,
        "task": task,
        "num_classes": len(class_names),
        "class_names": class_names,
        "feature_shape": shape,
        "seed": seed,
        "fractions": {"validation": validation, "test": test},
        "splits": splits,
    }
    write_index(out_dir, index)
    return index


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.prepare SOURCE --out DIR``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source", choices=SOURCES)
    parser.add_argument("--out", required=True)
    parser.add_argument("--validation-fraction", type=float, default=0.1)
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--shard-records", type=int, default=256)
    args = parser.parse_args(argv)
    index = prepare(args.source, args.out, args.validation_fraction, args.test_fraction, args.seed, args.shard_records)
    counts: Tuple[object, ...] = tuple((k, v["records"]) for k, v in sorted(index["splits"].items()))  # type: ignore[union-attr,index]
    print("prepared %s into %s: %s" % (args.source, args.out, counts))


if __name__ == "__main__":
    main()
