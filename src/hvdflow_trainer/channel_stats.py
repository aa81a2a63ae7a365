"""Per-channel mean and variance over many images, combined exactly across chunks (Chan et al.'s parallel update).

Each chunk keeps ``(count, mean, m2)`` per channel, m2 being the sum of squared deviations from the mean. Merging
two such summaries is exact and avoids the cancellation of the naive sum-of-squares formula, which matters for
16-bit reflectances summed over billions of pixels.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional


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
