"""The prepared dataset format: sharded TFRecords plus ``index.json`` (counts, classes, sha256 of every shard).

Each record holds ``x`` (the sample's float32 values, raw bytes, shape in the index) and ``y`` (int64 label indices;
one for single-label data, several for multi-label data).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

FORMAT = "hvdflow-tfrecord-v1"
INDEX = "index.json"


class DatasetError(Exception):
    """A prepared dataset is missing, incomplete or corrupt; the message names the file."""


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
    """The sha256 hex digest of a file."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        block = handle.read(chunk)
        while block:
            sha.update(block)
            block = handle.read(chunk)
    return sha.hexdigest()


def write_shards(out_dir: str, split: str, samples: Iterable[Tuple[object, Sequence[int]]], shard_records: int,
                 total: int) -> List[Dict[str, object]]:
    """Write ``(array, labels)`` samples as TFRecord shards of at most ``shard_records``; return their index entries."""
    import numpy as np
    import tensorflow as tf

    count = max(1, -(-total // shard_records))
    entries: List[Dict[str, object]] = []
    iterator = iter(samples)
    for shard in range(count):
        name = "%s-%05d-of-%05d.tfrecord" % (split, shard, count)
        path = os.path.join(out_dir, name)
        records = 0
        with tf.io.TFRecordWriter(path) as writer:
            while records < shard_records:
                try:
                    array, labels = next(iterator)
                except StopIteration:
                    break
                feature = {
                    "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[np.asarray(array, "float32").tobytes()])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in labels])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
                records += 1
        entries.append({"file": name, "records": records, "sha256": sha256_file(path)})
    return entries


def write_index(out_dir: str, index: Dict[str, object]) -> None:
    """Write ``index.json`` last and atomically: a dataset without it is not complete."""
    tmp = os.path.join(out_dir, ".%s.tmp" % INDEX)
    with open(tmp, "w") as handle:
        json.dump(index, handle, indent=2, sort_keys=True)
    os.replace(tmp, os.path.join(out_dir, INDEX))


def read_index(dataset_dir: str) -> Dict[str, object]:
    """The index of a prepared dataset, or DatasetError naming what is wrong."""
    path = os.path.join(dataset_dir, INDEX)
    try:
        with open(path) as handle:
            index = json.load(handle)
    except FileNotFoundError:
        raise DatasetError("%s is missing: the dataset was not prepared (or not completely)" % path) from None
    except ValueError as exc:
        raise DatasetError("%s is not valid JSON: %s" % (path, exc)) from None
    if index.get("format") != FORMAT:
        raise DatasetError("%s has format %r, expected %r" % (path, index.get("format"), FORMAT))
    return index


def verified_shards(dataset_dir: str, index: Dict[str, object], split: str) -> List[str]:
    """Paths of ``split``'s shards after checking each one's sha256 against the index."""
    splits = index["splits"]  # type: ignore[index]
    if split not in splits:  # type: ignore[operator]
        raise DatasetError("%s has no split %r (it has %s)" % (os.path.join(dataset_dir, INDEX), split, sorted(splits)))  # type: ignore[arg-type]
    paths = []
    for shard in splits[split]["shards"]:  # type: ignore[index]
        path = os.path.join(dataset_dir, shard["file"])
        if not os.path.exists(path):
            raise DatasetError("shard %s listed in the index is missing" % path)
        actual = sha256_file(path)
        if actual != shard["sha256"]:
            raise DatasetError("shard %s has sha256 %s but the index says %s: the file is corrupt"
                               % (path, actual, shard["sha256"]))
        paths.append(path)
    return paths


def parse_fn(index: Dict[str, object], multi_label: Optional[bool] = None):  # type: ignore[no-untyped-def]
    """A function turning serialized records into ``(x, y)`` tensors: y is an int label, or multi-hot."""
    import tensorflow as tf

    shape = list(index["feature_shape"])  # type: ignore[call-overload]
    classes = int(index["num_classes"])  # type: ignore[call-overload]
    multi = index["task"] == "multi-label" if multi_label is None else multi_label
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.VarLenFeature(tf.int64)}

    def parse(serialized):  # type: ignore[no-untyped-def]
        example = tf.io.parse_single_example(serialized, spec)
        x = tf.reshape(tf.io.decode_raw(example["x"], tf.float32), shape)
        labels = tf.sparse.to_dense(example["y"])
        if multi:
            y = tf.reduce_max(tf.one_hot(labels, classes), axis=0)
        else:
            y = labels[0]
        return x, y

    return parse
