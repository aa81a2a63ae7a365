"""scikit-learn's 8x8 handwritten digits: 1,797 real samples that ship inside the package, so the demo runs offline."""

from __future__ import annotations

from typing import Dict, List, Tuple

from .common import assign_splits


def _digits():  # type: ignore[no-untyped-def]
    from sklearn.datasets import load_digits

    return load_digits()


def list_samples(spec: Dict[str, object]) -> Dict[str, object]:
    """Every digit, split by the spec's seeded fractions."""
    digits = _digits()
    samples = [{"id": str(i), "split": None, "path": None, "labels": [int(t)]} for i, t in enumerate(digits.target)]
    assign_splits(samples, spec)
    return {"task": "single-label", "class_names": [str(c) for c in digits.target_names], "channel_names": ["gray"],
            "feature_shape": [8, 8, 1], "feature_dtype": "float32", "samples": samples, "excluded": {}}


def reader(listing: Dict[str, object], spec: Dict[str, object]):  # type: ignore[no-untyped-def]
    """Reads a digit by its index: grey levels scaled to [0, 1]."""
    features = (_digits().images / 16.0).astype("float32")[..., None]

    def read(sample: Dict[str, object]) -> Tuple[object, List[int], int]:
        pixels = features[int(str(sample["id"]))]
        return pixels, list(sample["labels"]), pixels.nbytes  # type: ignore[call-overload]

    return read
