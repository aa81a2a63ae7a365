"""What every source adapter shares: its errors, the seeded split, and reading list files and images.

An adapter has two halves. ``list_samples(spec)`` runs once per dataset and returns the *listing*: the task, class
names, channel names, the shape and dtype every sample must have, what was excluded and why, and the samples, each a
dict ``{"id", "split", "path", "labels"}`` (``labels`` None when only reading the sample reveals them). ``reader(
listing)`` returns a function that turns one sample into ``(array, label indices, bytes read)`` and raises
:class:`BadSample` (the sample is broken: the message names the file) or :class:`Excluded` (the sample is fine but
the dataset's definition leaves it out, e.g. a BigEarthNet patch with no 19-class label).
"""

from __future__ import annotations

import csv
import os
import re
import time
from typing import Dict, Iterable, List, Sequence

from hvdflow_index import SPLITS, PrepareError


class Progress:
    """Says how far a long loop of a listing is, on stdout (the step's run log, whose last line the step's progress
    shows), at most every :attr:`seconds` (the command's ``--progress-seconds``)."""

    seconds = 30.0

    def __init__(self) -> None:
        self.started = self.reported = time.time()

    def say(self, text: str, *values: object) -> None:
        """Print ``text % values`` with the time so far if :attr:`seconds` have passed since the last line."""
        if time.time() - self.reported >= Progress.seconds:
            self.reported = time.time()
            print("%s, %.0f s" % (text % values, self.reported - self.started), flush=True)


class BadSample(Exception):
    """One sample cannot be read: ``path`` is the offending file, ``reason`` what is wrong with it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__("%s: %s" % (path, reason))
        self.path, self.reason = path, reason


class Excluded(Exception):
    """A readable sample that the dataset's definition leaves out; ``reason`` is the key it is counted under."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def split_indices(count: int, validation: float, test: float, seed: int) -> Dict[str, List[int]]:
    """A seeded permutation of ``range(count)`` cut into train, validation and test."""
    import numpy as np

    if not (0 <= validation < 1 and 0 <= test < 1 and validation + test < 1):
        raise ValueError("validation (%s) and test (%s) fractions must be in [0, 1) and sum below 1" % (validation, test))
    order = np.random.RandomState(seed).permutation(count).tolist()
    n_test, n_val = int(round(count * test)), int(round(count * validation))
    return {"test": order[:n_test], "validation": order[n_test:n_test + n_val], "train": order[n_test + n_val:]}


def assign_splits(samples: List[Dict[str, object]], spec: Dict[str, object], strata: Sequence[object] = ()) -> None:
    """Set each sample's ``split`` by the spec's seeded fractions; with ``strata`` (one key per sample), per stratum."""
    groups: Dict[object, List[int]] = {}
    for i in range(len(samples)):
        groups.setdefault(strata[i] if strata else None, []).append(i)
    for members in groups.values():
        parts = split_indices(len(members), float(spec["validation_fraction"]), float(spec["test_fraction"]),  # type: ignore[arg-type]
                              int(spec["seed"]))  # type: ignore[call-overload]
        for split, positions in parts.items():
            for position in positions:
                samples[members[position]]["split"] = split


def read_name_list(path: str) -> List[str]:
    """Column 0 of a CSV file without a header (BigEarthNet's patch lists); blank lines skipped."""
    try:
        with open(path, newline="") as handle:
            return [row[0].strip() for row in csv.reader(handle) if row and row[0].strip()]
    except OSError as exc:
        raise PrepareError("cannot read the list %s: %s" % (path, exc.strerror or exc)) from None


def as_hwc(pixels, where: str):  # type: ignore[no-untyped-def]
    """``pixels`` as H x W x C (a 2-D array gets one channel); BadSample naming ``where`` (a file, an item) for any
    other number of dimensions."""
    if pixels.ndim == 2:
        return pixels[:, :, None]
    if pixels.ndim != 3:
        raise BadSample(where, "has %d dimensions; expected an image (H x W or H x W x channels)" % pixels.ndim)
    return pixels


def natural_key(name: str) -> List[object]:
    """Sort key that orders embedded numbers by value: frame_2 before frame_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def read_image(path: str):  # type: ignore[no-untyped-def]
    """The pixels of a TIFF or PNG file as an array (H, W) or (H, W, C); BadSample if missing or unreadable."""
    import imagecodecs
    import tifffile

    if not os.path.isfile(path):
        raise BadSample(path, "missing")
    try:
        if path.lower().endswith((".tif", ".tiff")):
            pixels = tifffile.imread(path)
        else:
            with open(path, "rb") as handle:
                pixels = imagecodecs.png_decode(handle.read())
    except Exception as exc:  # tifffile and imagecodecs raise many types for a corrupt file
        raise BadSample(path, "unreadable (%s: %s)" % (type(exc).__name__, exc)) from None
    if pixels.size == 0:  # tifffile warns and returns nothing for a file with a broken page offset
        raise BadSample(path, "unreadable (no image data)")
    return pixels


def ordered(samples: Iterable[Dict[str, object]], seed: int) -> List[Dict[str, object]]:
    """Samples in preparation order: train (seeded permutation, so shards are not sorted by place or class), then
    validation and test in listing order."""
    import numpy as np

    by_split: Dict[str, List[Dict[str, object]]] = {split: [] for split in SPLITS}
    for sample in samples:
        by_split[str(sample["split"])].append(sample)
    train = by_split["train"]
    permutation = np.random.RandomState(seed).permutation(len(train)).tolist()
    return [train[i] for i in permutation] + by_split["validation"] + by_split["test"]
