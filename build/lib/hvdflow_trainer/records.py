"""Writing and decoding the prepared dataset's TFRecord shards (the index itself: :mod:`hvdflow_index`).

Each record holds ``x`` (the sample's pixels as raw bytes; shape and pixel type in the index) and ``y`` (int64 label
indices; one for single-label data, several for multi-label data).
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence

from hvdflow_index import sha256_file


def _record_bytes(array, labels: Sequence[int], dtype: str) -> bytes:  # type: ignore[no-untyped-def]
    import numpy as np
    import tensorflow as tf

    feature = {
        "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[np.asarray(array, dtype).tobytes()])),
        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in labels])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class ShardWriter:
    """Writes one split's records into TFRecord shards of about ``target_bytes`` each.

    A shard is closed once it reaches the target, so shards hold whole records and are at most one record larger
    than the target. Shards are named ``<split>-<n>.tfrecord``; :meth:`close` returns their index entries.
    """

    def __init__(self, out_dir: str, split: str, target_bytes: int, dtype: str) -> None:
        self.out_dir, self.split, self.target, self.dtype = out_dir, split, max(1, target_bytes), dtype
        self.entries: List[Dict[str, object]] = []
        self._writer = None  # type: Optional[object]
        self._name, self._records, self._bytes = "", 0, 0

    def write(self, array, labels: Sequence[int]) -> None:  # type: ignore[no-untyped-def]
        """Append one record (``array`` stored as the dataset's pixel type, ``labels`` as int64 indices)."""
        import tensorflow as tf

        if self._writer is None:
            self._name = "%s-%05d.tfrecord" % (self.split, len(self.entries))
            self._writer = tf.io.TFRecordWriter(os.path.join(self.out_dir, self._name))
            self._records, self._bytes = 0, 0
        record = _record_bytes(array, labels, self.dtype)
        self._writer.write(record)  # type: ignore[attr-defined]
        self._records += 1
        self._bytes += len(record) + 16  # TFRecord framing: length, its CRC, data, data CRC
        if self._bytes >= self.target:
            self._finish()

    def _finish(self) -> None:
        self._writer.close()  # type: ignore[union-attr]
        self._writer = None
        path = os.path.join(self.out_dir, self._name)
        self.entries.append({"file": self._name, "records": self._records, "bytes": os.path.getsize(path),
                             "sha256": sha256_file(path)})

    def close(self) -> List[Dict[str, object]]:
        """Finish the open shard; the index entries (file, records, bytes, sha256) of every shard written."""
        if self._writer is not None:
            self._finish()
        return self.entries


def parse_fn(index: Dict[str, object], multi_label: Optional[bool] = None):  # type: ignore[no-untyped-def]
    """A function turning serialized records into ``(x, y)`` tensors: y is an int label, or multi-hot.

    ``x`` is decoded from the dataset's pixel type to float32 and, when the index has ``normalization``, scaled per
    channel by the training split's mean and standard deviation.
    """
    import tensorflow as tf

    shape = list(index["feature_shape"])  # type: ignore[call-overload]
    classes = int(index["num_classes"])  # type: ignore[call-overload]
    multi = index["task"] == "multi-label" if multi_label is None else multi_label
    dtype = tf.as_dtype(str(index.get("feature_dtype", "float32")))
    spec = {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.VarLenFeature(tf.int64)}
    norm = index.get("normalization")

    def parse(serialized):  # type: ignore[no-untyped-def]
        example = tf.io.parse_single_example(serialized, spec)
        x = tf.cast(tf.reshape(tf.io.decode_raw(example["x"], dtype), shape), tf.float32)
        if norm:
            x = (x - tf.constant(norm["mean"], tf.float32)) / tf.constant(norm["std"], tf.float32)  # type: ignore[index]
        labels = tf.sparse.to_dense(example["y"])
        if multi:
            y = tf.reduce_max(tf.one_hot(labels, classes), axis=0)
        else:
            y = labels[0]
        return x, y

    return parse
