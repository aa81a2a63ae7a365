"""BigEarthNet-S2 as distributed: v1.0 (a folder per patch with label JSON) and v2.0 / reBEN (tile folders and a
metadata table). Formats, with sources: docs/bigearthnet-formats.md.

Every band is brought to the 10 m grid (120x120) by pixel replication (nearest neighbour), 2x for the 20 m bands
(60x60) and 6x for the 60 m bands (20x20). All bands of a patch cover the same 1.2 km square, so each coarse pixel
maps onto an exact 2x2 or 6x6 block: replication keeps every measured value and invents none (interpolation would
blur edges and mix neighbouring reflectances, and its result depends on the library), and it is the same on every
machine. Pixels are kept as uint16 digital numbers; per-band normalisation happens when the shards are read, with the
training split's statistics from the index.
"""

from __future__ import annotations

import json
import os
import re
from typing import Callable, Dict, List, Tuple

from .bigearthnet_labels import LABELS_19, NOMENCLATURES, v1_label_indices
from .common import SPLITS, BadSample, Excluded, PrepareError, assign_splits, read_image, read_name_list

BANDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")
BAND_SIZE = {"B01": 20, "B09": 20, "B02": 120, "B03": 120, "B04": 120, "B08": 120,
             "B05": 60, "B06": 60, "B07": 60, "B8A": 60, "B11": 60, "B12": 60}
GRID = 120
RESAMPLING = "nearest neighbour (pixel replication) to the 10 m grid, 120x120"
# v1 patch folders: the time has 5 digits in some names and the patch indices are not zero-padded
V1_PATCH = re.compile(r"^S2[AB]_MSIL2A_\d{8}T\d{5,6}_\d{1,2}_\d{1,2}$")

Reader = Callable[[Dict[str, object]], Tuple[object, List[int], int]]


def _listing(spec: Dict[str, object], samples: List[Dict[str, object]], excluded: Dict[str, int]) -> Dict[str, object]:
    bands = list(spec["bands"])  # type: ignore[call-overload]
    return {"task": "multi-label", "class_names": list(NOMENCLATURES[int(spec["nomenclature"])]),  # type: ignore[call-overload]
            "channel_names": bands, "feature_shape": [GRID, GRID, len(bands)], "feature_dtype": "uint16",
            "resampling": RESAMPLING, "samples": samples, "excluded": excluded}


def _patch_names(root: str) -> List[str]:
    try:
        names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and V1_PATCH.match(entry.name))
    except OSError as exc:
        raise PrepareError("cannot list the BigEarthNet v1 folder %s: %s" % (root, exc.strerror or exc)) from None
    if not names:
        raise PrepareError("%s has no BigEarthNet v1 patch folders (S2A_MSIL2A_<date>T<time>_<h>_<v>)" % root)
    return names


def list_v1(spec: Dict[str, object]) -> Dict[str, object]:
    """The patches of a v1.0 folder less the snow and cloud/shadow lists, split by the split lists or by seed."""
    root = str(spec["path"])
    names = _patch_names(root)
    excluded = {"seasonal_snow": 0, "cloud_or_shadow": 0}
    dropped = set()
    for key, list_key in (("seasonal_snow", "seasonal_snow_list"), ("cloud_or_shadow", "cloud_shadow_list")):
        if spec.get(list_key):
            listed = set(read_name_list(str(spec[list_key]))) - dropped
            excluded[key] = len(listed.intersection(names))
            dropped |= listed
    kept = [name for name in names if name not in dropped]
    split_lists = spec.get("split_lists") or {}
    if split_lists:
        split_of: Dict[str, str] = {}
        for split in SPLITS:
            for name in read_name_list(str(split_lists[split])):  # type: ignore[index]
                split_of[name] = split
        excluded["not_in_split_lists"] = sum(1 for name in kept if name not in split_of)
        # a listed patch that is not on disk stays in: reading it reports the missing folder by path
        wanted = sorted(name for name in split_of if name not in dropped)
        samples = [{"id": n, "split": split_of[n], "path": os.path.join(root, n), "labels": None} for n in wanted]
    else:
        samples = [{"id": n, "split": None, "path": os.path.join(root, n), "labels": None} for n in kept]
        assign_splits(samples, spec)
    return _listing(spec, samples, excluded)


def list_v2(spec: Dict[str, object]) -> Dict[str, object]:
    """The patches of a reBEN (v2.0) S2 folder as its metadata table lists them, with its labels and split."""
    import pyarrow.parquet as pq

    table_path, root = str(spec["metadata"]), str(spec["path"])
    if int(spec["nomenclature"]) != 19:  # type: ignore[call-overload]
        raise PrepareError("BigEarthNet v2 labels use the 19-class nomenclature only; set nomenclature: 19")
    try:
        table = pq.read_table(table_path)
    except Exception as exc:  # pyarrow raises OSError or ArrowInvalid for missing or corrupt files
        raise PrepareError("cannot read the metadata table %s: %s" % (table_path, exc)) from None
    for column in ("patch_id", "labels", "split"):
        if column not in table.column_names:
            raise PrepareError("metadata table %s has no column %r (it has %s)" % (table_path, column, table.column_names))
    class_index = {name: i for i, name in enumerate(LABELS_19)}
    excluded = {"seasonal_snow": 0, "cloud_or_shadow": 0}
    samples = []
    for row in sorted(table.to_pylist(), key=lambda r: r["patch_id"]):
        patch = row["patch_id"]
        if row.get("contains_seasonal_snow"):
            excluded["seasonal_snow"] += 1
            continue
        if row.get("contains_cloud_or_shadow"):
            excluded["cloud_or_shadow"] += 1
            continue
        if row["split"] not in SPLITS:
            raise PrepareError("metadata table %s: patch %s has split %r, expected one of %s"
                               % (table_path, patch, row["split"], ", ".join(SPLITS)))
        unknown = [name for name in row["labels"] if name not in class_index]
        if unknown:
            raise PrepareError("metadata table %s: patch %s has labels outside the 19-class nomenclature: %s"
                               % (table_path, patch, unknown))
        tile = "_".join(patch.split("_")[:-2])
        samples.append({"id": patch, "split": row["split"], "path": os.path.join(root, tile, patch),
                        "labels": sorted(class_index[name] for name in row["labels"])})
    if not samples:
        raise PrepareError("metadata table %s lists no usable patch" % table_path)
    return _listing(spec, samples, excluded)


def read_bands(directory: str, patch: str, bands: List[str]) -> Tuple[object, int]:
    """A patch's bands on the 120x120 grid, stacked in ``bands`` order (uint16, H x W x bands), and bytes read."""
    import numpy as np

    layers, nbytes = [], 0
    for band in bands:
        path = os.path.join(directory, "%s_%s.tif" % (patch, band))
        if not os.path.exists(path) and os.path.exists(path + "f"):
            path += "f"
        pixels = read_image(path)
        nbytes += os.path.getsize(path)
        size = BAND_SIZE[band]
        if pixels.shape != (size, size):
            raise BadSample(path, "shape %s, but band %s is %dx%d" % ("x".join(map(str, pixels.shape)), band, size, size))
        if pixels.dtype.kind not in "ui" or pixels.min() < 0 or pixels.max() > 65535:
            raise BadSample(path, "values of type %s outside 0..65535 (expected uint16 digital numbers)" % pixels.dtype)
        factor = GRID // size
        layers.append(np.repeat(np.repeat(pixels.astype("uint16"), factor, axis=0), factor, axis=1))
    return np.stack(layers, axis=-1), nbytes


def v1_labels(directory: str, patch: str, nomenclature: int) -> Tuple[List[int], int]:
    """Class indices of a v1 patch from its ``<patch>_labels_metadata.json``, and the file's size."""
    path = os.path.join(directory, "%s_labels_metadata.json" % patch)
    if not os.path.isfile(path):
        raise BadSample(path, "missing")
    try:
        with open(path) as handle:
            names = json.load(handle)["labels"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadSample(path, "not a BigEarthNet label file (%s: %s)" % (type(exc).__name__, exc)) from None
    try:
        labels = v1_label_indices(list(names), nomenclature)
    except KeyError as exc:
        raise BadSample(path, "unknown CORINE class name %s" % exc) from None
    if not labels:
        raise Excluded("no_%d_class_label" % nomenclature)
    return labels, os.path.getsize(path)


def reader(listing: Dict[str, object], spec: Dict[str, object]) -> Reader:
    """Reads one patch: its bands and, for v1, its label file."""
    bands = list(spec["bands"])  # type: ignore[call-overload]
    nomenclature = int(spec["nomenclature"])  # type: ignore[call-overload]
    v1 = spec["source"] == "bigearthnet-v1"

    def read(sample: Dict[str, object]) -> Tuple[object, List[int], int]:
        directory, patch = str(sample["path"]), str(sample["id"])
        if not os.path.isdir(directory):
            raise BadSample(directory, "patch folder missing")
        labels, label_bytes = v1_labels(directory, patch, nomenclature) if v1 else (list(sample["labels"]), 0)  # type: ignore[call-overload]
        pixels, nbytes = read_bands(directory, patch, bands)
        return pixels, labels, nbytes + label_bytes

    return read
