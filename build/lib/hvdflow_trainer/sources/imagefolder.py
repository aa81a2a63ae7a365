"""Class-per-folder images (``<root>/<class>/<image>``), or sequences (``<root>/<class>/<sequence>/<frame>``).

Images are PNG or TIFF, 8- or 16-bit (or float32 TIFF), with one or more channels. The first sample fixes the shape
and pixel type every other sample must have; a sample that differs is a bad sample, reported by path. In sequence mode
(a microscopy time series per folder) the frames are sorted by name with numbers compared by value (frame_2 before
frame_10) and stacked along the channel axis, frame after frame, so one sample is H x W x (frames x channels) and any
2-D model takes it.
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

from .common import BadSample, PrepareError, Progress, as_hwc, assign_splits, natural_key, read_image

IMAGE_SUFFIXES = (".png", ".tif", ".tiff")
PIXEL_TYPES = ("uint8", "uint16", "float32")


def _visible(directory: str) -> List[os.DirEntry]:  # type: ignore[type-arg]
    try:
        return sorted((e for e in os.scandir(directory) if not e.name.startswith(".")), key=lambda e: natural_key(e.name))
    except OSError as exc:
        raise PrepareError("cannot list %s: %s" % (directory, exc.strerror or exc)) from None


def frame_paths(directory: str) -> List[str]:
    """The image files of a sequence folder, in frame order."""
    return [e.path for e in _visible(directory) if e.is_file() and e.name.lower().endswith(IMAGE_SUFFIXES)]


def list_samples(spec: Dict[str, object]) -> Dict[str, object]:
    """The samples under ``spec["path"]``, one class per subfolder, split by seed within each class."""
    root, sequence = str(spec["path"]), bool(spec.get("sequence"))
    classes = [e.name for e in _visible(root) if e.is_dir()]
    if len(classes) < 2:
        raise PrepareError("%s needs at least 2 class folders, found %d (%s)" % (root, len(classes), classes))
    samples: List[Dict[str, object]] = []
    progress = Progress()
    for label, name in enumerate(classes):
        progress.say("listing %s: %d of %d class folders, %d samples so far", root, label, len(classes), len(samples))
        entries = _visible(os.path.join(root, name))
        if sequence:
            found = [e for e in entries if e.is_dir()]
        else:
            found = [e for e in entries if e.is_file() and e.name.lower().endswith(IMAGE_SUFFIXES)]
        if not found:
            raise PrepareError("class folder %s has no %s" % (os.path.join(root, name), "sequence folders" if sequence
                                                              else "images (%s)" % ", ".join(IMAGE_SUFFIXES)))
        samples += [{"id": "%s/%s" % (name, e.name), "split": None, "path": e.path, "labels": [label]} for e in found]
    assign_splits(samples, spec, strata=[s["labels"][0] for s in samples])  # type: ignore[index]
    first = str(samples[0]["path"])
    frames = frame_paths(first) if sequence else [first]
    if not frames:
        raise PrepareError("sequence folder %s has no frames" % first)
    pixels = as_hwc(read_image(frames[0]), frames[0])
    if str(pixels.dtype) not in PIXEL_TYPES:
        raise PrepareError("%s has pixels of type %s; supported: %s" % (frames[0], pixels.dtype, ", ".join(PIXEL_TYPES)))
    height, width, channels = pixels.shape
    channel_names = ["c%d" % c for c in range(channels)]
    if sequence:
        channel_names = ["t%d.%s" % (t, c) for t in range(len(frames)) for c in channel_names]
    return {"task": "single-label", "class_names": classes, "channel_names": channel_names,
            "feature_shape": [height, width, len(channel_names)], "feature_dtype": str(pixels.dtype),
            "frame_shape": [height, width, channels], "frames": len(frames) if sequence else None,
            "samples": samples, "excluded": {}}


def reader(listing: Dict[str, object], spec: Dict[str, object]):  # type: ignore[no-untyped-def]
    """Reads one image, or one sequence's frames stacked along the channel axis."""
    import numpy as np

    frame_shape = tuple(listing["frame_shape"])  # type: ignore[call-overload]
    dtype, frames = str(listing["feature_dtype"]), listing["frames"]

    def read_frame(path: str):  # type: ignore[no-untyped-def]
        pixels = as_hwc(read_image(path), path)
        if pixels.shape != frame_shape or str(pixels.dtype) != dtype:
            raise BadSample(path, "is %s %s; the dataset's images are %s %s" % (
                "x".join(map(str, pixels.shape)), pixels.dtype, "x".join(map(str, frame_shape)), dtype))
        return pixels

    def read(sample: Dict[str, object]) -> Tuple[object, List[int], int]:
        path = str(sample["path"])
        if frames is None:
            return read_frame(path), list(sample["labels"]), os.path.getsize(path)  # type: ignore[call-overload]
        if not os.path.isdir(path):
            raise BadSample(path, "sequence folder missing")
        paths = frame_paths(path)
        if len(paths) != frames:
            raise BadSample(path, "has %d frames; the dataset's sequences have %d" % (len(paths), frames))
        stacked = np.concatenate([read_frame(p) for p in paths], axis=-1)
        return stacked, list(sample["labels"]), sum(os.path.getsize(p) for p in paths)  # type: ignore[call-overload]

    return read
