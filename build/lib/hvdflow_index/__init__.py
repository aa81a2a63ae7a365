"""The prepared dataset's index, shared by both sides of the seam: what the host and the trainer both read.

A prepared dataset is a folder of TFRecord shards and ``index.json`` (counts, classes, sha256 of every shard,
per-channel normalisation). This module owns that format: its name and files, reading and verifying an index, the
exact merge of per-channel statistics, and :func:`gather`, which turns the chunk jobs' reports into the index. The
host runs the gather and verifies staged copies; the trainer writes the chunks and reads the index.

It needs only the standard library (numpy only inside :meth:`ChannelStats.add_image`), runs on Python 3.8, and
imports neither ``hvdflow`` (the host) nor ``hvdflow_trainer`` (the container side), nor TensorFlow or Horovod.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Dict, List, Optional

from hvdflow_wire.replace import replaced

FORMAT = "hvdflow-tfrecord-v2"
INDEX = "index.json"
DATASET_FILE = "dataset.json"
"""The manifest's summary (spec, classes, shape) written by the listing step."""
REPORT_FILE = "report.json"
"""What one chunk job wrote: its shards per split, training statistics, exclusions and skipped samples."""
SPLITS = ("train", "validation", "test")
SKIPPED_LISTED = 1000  # bad samples listed by path in the index; all are counted


class DatasetError(Exception):
    """A prepared dataset is missing, incomplete or corrupt; the message names the file."""


class PrepareError(Exception):
    """The dataset as a whole cannot be prepared (a missing folder, a bad metadata table); the message says where."""


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
    """The sha256 hex digest of a file."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        block = handle.read(chunk)
        while block:
            sha.update(block)
            block = handle.read(chunk)
    return sha.hexdigest()


def content_sha256(index: Dict[str, object]) -> str:
    """The sha256 of an index's content less the preparation's timings (``preparation``): equal for two
    preparations of the same data, where the file's own sha256 differs."""
    content = {key: value for key, value in index.items() if key != "preparation"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_json(path: str, data: object) -> None:
    """Write ``data`` as JSON atomically (a temporary file beside ``path``, then renamed)."""
    with replaced(path) as handle:
        json.dump(data, handle, indent=2, sort_keys=True)


def write_index(out_dir: str, index: Dict[str, object]) -> None:
    """Write ``index.json`` last and atomically: a dataset without it is not complete."""
    write_json(os.path.join(out_dir, INDEX), index)


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


class ChannelStats:
    """Running per-channel statistics of the pixels of the images added."""

    def __init__(self, count: int = 0, mean: Optional[List[float]] = None, m2: Optional[List[float]] = None) -> None:
        self.count, self.mean, self.m2 = count, list(mean or []), list(m2 or [])

    def add_image(self, pixels) -> None:  # type: ignore[no-untyped-def]
        """Add an H x W x C image."""
        import numpy as np

        values = np.asarray(pixels, dtype="float64").reshape(-1, pixels.shape[-1])
        mean = values.mean(axis=0)
        m2 = ((values - mean) ** 2).sum(axis=0)
        self.merge(ChannelStats(values.shape[0], mean.tolist(), m2.tolist()))

    def merge(self, other: "ChannelStats") -> None:
        """Fold ``other`` into these statistics."""
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.mean, self.m2 = other.count, list(other.mean), list(other.m2)
            return
        total = self.count + other.count
        for c in range(len(self.mean)):
            delta = other.mean[c] - self.mean[c]
            self.m2[c] += other.m2[c] + delta * delta * self.count * other.count / total
            self.mean[c] += delta * other.count / total
        self.count = total

    def to_json(self) -> Dict[str, object]:
        """The summary, to merge later (:meth:`from_json`)."""
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    @classmethod
    def from_json(cls, data: Dict[str, object]) -> "ChannelStats":
        """A summary written by :meth:`to_json`."""
        return cls(int(data["count"]), list(data["mean"]), list(data["m2"]))  # type: ignore[call-overload]

    def normalization(self) -> Dict[str, object]:
        """Mean and (population) standard deviation per channel; a constant channel gets std 1 so it divides safely."""
        std = [math.sqrt(m2 / self.count) if self.count else 0.0 for m2 in self.m2]
        return {"mean": list(self.mean), "std": [s if s > 0 else 1.0 for s in std], "pixels_per_channel": self.count}


def _load(path: str) -> Dict[str, object]:
    with open(path) as handle:
        return json.load(handle)


def gather(manifest_dir: str, chunk_dirs: List[str], out_dir: str) -> Dict[str, object]:
    """Combine the chunks' reports into ``out_dir/index.json`` (written last) and return the index.

    ``chunk_dirs`` must lie inside ``out_dir``; shard paths in the index are relative to it.
    """
    summary = _load(os.path.join(manifest_dir, DATASET_FILE))
    spec: Dict[str, object] = summary["spec"]  # type: ignore[assignment]
    splits: Dict[str, Dict[str, object]] = {split: {"records": 0, "shards": []} for split in SPLITS}
    stats = ChannelStats()
    excluded: Dict[str, int] = dict(summary["excluded"])  # type: ignore[call-overload]
    skipped: List[Dict[str, str]] = []
    input_bytes, seconds = 0, []
    for directory in chunk_dirs:
        report = _load(os.path.join(directory, REPORT_FILE))
        prefix = os.path.relpath(directory, out_dir)
        for split, part in report["splits"].items():  # type: ignore[union-attr]
            splits[split]["records"] += part["records"]  # type: ignore[operator]
            splits[split]["shards"] += [dict(s, file="%s/%s" % (prefix, s["file"])) for s in part["shards"]]  # type: ignore[operator]
        stats.merge(ChannelStats.from_json(report["train_stats"]))  # type: ignore[arg-type]
        for reason, count in report["excluded"].items():  # type: ignore[union-attr]
            excluded[reason] = excluded.get(reason, 0) + count
        skipped += report["skipped"]  # type: ignore[arg-type]
        input_bytes += int(report["input_bytes"])  # type: ignore[call-overload]
        seconds.append(report["seconds"])
    if not splits["train"]["records"]:
        raise PrepareError("no training samples were prepared (records per split: %s)"
                           % {k: v["records"] for k, v in splits.items()})
    index = {
        "format": FORMAT,
        "dataset": spec.get("name"),
        "source": spec["source"],
        "task": summary["task"],
        "num_classes": len(summary["class_names"]),  # type: ignore[arg-type]
        "class_names": summary["class_names"],
        "channel_names": summary["channel_names"],
        "feature_shape": summary["feature_shape"],
        "feature_dtype": summary["feature_dtype"],
        "seed": spec["seed"],
        "fractions": {"validation": spec["validation_fraction"], "test": spec["test_fraction"]},
        "spec": spec,
        "splits": splits,
        "normalization": stats.normalization(),
        "excluded": excluded,
        "skipped": {"count": len(skipped), "samples": skipped[:SKIPPED_LISTED]},
        "preparation": {"chunks": len(chunk_dirs), "input_bytes": input_bytes, "chunk_seconds": seconds,
                        "listing_seconds": summary["listing_seconds"]},
    }
    for key in ("resampling", "frames"):
        if summary.get(key) is not None:
            index[key] = summary[key]
    write_index(out_dir, index)
    return index
