"""A reader for a folder of ``.npy`` arrays with a CSV of labels, as hvdflow calls a user's own data format.

The folder (the dataset's ``path``)::

    labels.csv          # a header "file,label", then one row per array: file name, class name
    0001.npy            # one array per item: H x W or H x W x C, uint8, uint16 or float32
    0002.npy
    ...

In the config::

    datasets:
      cells:
        source: {code: examples/npy-reader/, read: npy_labels:read}   # items() is found beside read()
        path: data/cells
        image: hvdflow-cpu

``items`` lists the items once; ``read`` is called once per item, in the preparation's containers (numpy is there).
"""

from __future__ import annotations

import csv
import os

import numpy as np


def items(path: str, labels_file: str = "labels.csv") -> tuple[list[str], list[tuple[str, int]]]:
    """The class names (sorted) and every ``(file name, class index)`` of ``labels_file`` in ``path``."""
    with open(os.path.join(path, labels_file), newline="") as handle:
        rows = [(row["file"], row["label"]) for row in csv.DictReader(handle)]
    class_names = sorted({label for _, label in rows})
    return class_names, [(name, class_names.index(label)) for name, label in rows]


def read(path: str, item: str, labels_file: str = "labels.csv") -> np.ndarray:
    """The array of the item ``item`` (its file name in ``path``)."""
    return np.load(os.path.join(path, item), allow_pickle=False)
