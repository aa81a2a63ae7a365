"""A user's own data format: functions in the user's folder list the items and read one.

The dataset's ``source`` names them (``source: {code: readers/, read: npy_labels:read, list: npy_labels:items,
task: single-label, options: {...}}``; ``list`` defaults to the function ``items`` of ``read``'s module):

- ``items(path, **options)`` returns ``(class_names, items)``: the class names in label order, and every item as
  ``(item_id, label)``, ``item_id`` a string unique in the dataset and ``label`` a class index (single-label) or a
  list of them (multi-label);
- ``read(path, item, **options)`` returns the item ``item``'s array, H x W or H x W x C, of uint8, uint16 or float32.

``path`` is the dataset's folder (bound into the container). The first item fixes the shape and type every item must
have; an item of another is a bad sample named by its id (it stops the chunk, or is skipped and counted with
``skip_bad_samples``). hvdflow splits the items by its seeded fractions (per class for single-label), shards them
into checksummed TFRecords and normalises them as for its own sources. Errors in the user's code are named with the
user's file and line (:mod:`hvdflow_trainer.user_code`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

from ..user_code import UserCodeError, call, load_function
from .common import BadSample, PrepareError, as_hwc, assign_splits
from .imagefolder import PIXEL_TYPES


class _Reader:
    """The user's two functions, their folder, the dataset's folder and the options, loaded from a resolved spec."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        source: Mapping[str, Any] = spec["source"]
        self.code, self.read_ref = str(source["code"]), str(source["read"])
        self.list_ref = str(source.get("list") or self.read_ref.split(":", 1)[0] + ":items")
        self.path, self.options = str(spec["path"]), dict(source.get("options") or {})
        self.multi_label = source.get("task", "single-label") == "multi-label"
        self._read = load_function(self.code, self.read_ref)  # loaded once: read is called for every item

    def items(self) -> Tuple[List[str], List[Tuple[str, List[int]]]]:
        """The class names and every ``(item_id, label indices)``, checked."""
        found = call(load_function(self.code, self.list_ref), self.list_ref, self.code, path=self.path,
                     **self.options)
        if not (isinstance(found, (tuple, list)) and len(found) == 2):
            raise UserCodeError("%s returned %s; expected (class_names, items)" % (self.list_ref, type(found).__name__))
        class_names, items = [str(c) for c in found[0]], list(found[1])
        if len(class_names) < 2:
            raise UserCodeError("%s returned %d class name(s); a dataset needs at least 2" % (self.list_ref,
                                                                                           len(class_names)))
        checked, seen = [], set()
        for entry in items:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
                raise UserCodeError("%s: item %r is not (item_id, label)" % (self.list_ref, entry))
            item, label = str(entry[0]), entry[1]
            labels = list(label) if self.multi_label and isinstance(label, (list, tuple)) else [label]
            if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < len(class_names) for x in labels):
                raise UserCodeError("%s: item %s has label %r; expected %s of 0..%d (the class names' positions)"
                                    % (self.list_ref, item, label, "indices" if self.multi_label else "an index",
                                       len(class_names) - 1))
            if item in seen:
                raise UserCodeError("%s: item id %s appears twice" % (self.list_ref, item))
            seen.add(item)
            checked.append((item, labels))
        return class_names, checked

    def read(self, item: str) -> Any:
        """The item's array as H x W x C (a 2-D array gets one channel); BadSample naming the item otherwise."""
        import numpy as np

        return as_hwc(np.asarray(call(self._read, self.read_ref, self.code, path=self.path, item=item, **self.options)),
                      item)


def list_samples(spec: Dict[str, object]) -> Dict[str, object]:
    """The user's items, split by the spec's seeded fractions (per class for single-label), shape and type from the
    first item."""
    reader = _Reader(spec)
    class_names, items = reader.items()
    if not items:
        raise PrepareError("%s listed no items in %s" % (reader.list_ref, reader.path))
    samples: List[Dict[str, object]] = [{"id": item, "split": None, "path": item, "labels": labels}
                                        for item, labels in items]
    assign_splits(samples, spec, strata=() if reader.multi_label else [labels[0] for _, labels in items])
    first = reader.read(items[0][0])
    if str(first.dtype) not in PIXEL_TYPES:
        raise PrepareError("%s returned %s for item %s; supported: %s (convert in your reader)"
                           % (reader.read_ref, first.dtype, items[0][0], ", ".join(PIXEL_TYPES)))
    height, width, channels = first.shape
    return {"task": "multi-label" if reader.multi_label else "single-label", "class_names": class_names,
            "channel_names": ["c%d" % c for c in range(channels)], "feature_shape": [height, width, channels],
            "feature_dtype": str(first.dtype), "samples": samples, "excluded": {}}


def reader(listing: Dict[str, object], spec: Dict[str, object]) -> Callable[[Dict[str, object]], Tuple[Any, List[int], int]]:
    """Reads one item with the user's function; an item of another shape or type than the first is a bad sample."""
    user = _Reader(spec)
    shape, dtype = tuple(listing["feature_shape"]), str(listing["feature_dtype"])  # type: ignore[call-overload]

    def read(sample: Dict[str, object]) -> Tuple[Any, List[int], int]:
        item = str(sample["id"])
        array = user.read(item)
        if array.shape != shape or str(array.dtype) != dtype:
            raise BadSample(item, "%s returned %s %s; the dataset's items are %s %s (its first item's)" % (
                user.read_ref, "x".join(map(str, array.shape)), array.dtype, "x".join(map(str, shape)), dtype))
        return array, list(sample["labels"]), int(array.nbytes)  # type: ignore[call-overload]

    return read
