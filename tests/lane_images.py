"""The images the suite's lanes build from their recipes, in the order scripts/test.sh builds them beside the lanes.

Run as a script (``python tests/lane_images.py LOG``), it builds each into the cache (``~/.cache/hvdflow``), one
after the other, exactly as the session fixtures of conftest.py do (:func:`build_for_tests`): a fixture that needs
one then waits on the build lock and finds it built, instead of starting its build when its first test asks. The
test bed's lane runs the tests of the later images last (conftest.py), so that it rarely waits for one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from hvdflow.images.build.image import BuiltImage, build_image  # noqa: E402
from hvdflow.images.catalog import load_catalog  # noqa: E402

LANE_IMAGES = {"cpu_image": "hvdflow-cpu", "torch_image": "hvdflow-torch-cpu", "oldest_image": "hvdflow-cpu-oldest"}
"""Session fixture -> catalogue image, in build order (the first is what nearly every end-to-end test needs)."""


def build_for_tests(name: str, log: Path) -> BuiltImage:
    """The catalogue image ``name`` built from its recipe, or taken from the cache.

    It follows Debian's mirror where a pinned version is gone (named in the build log), so that the suite builds on
    any later day; the strict check is tested on the small recipe (tests/test_image_build.py)."""
    spec = load_catalog(REPO / "containers" / "catalog.yaml")[name]
    return build_image(spec, log, debian="follow")


def image_order(fixturenames: list[str]) -> int:
    """The place in :data:`LANE_IMAGES` of the latest-built image a test needs (0 for none or the first)."""
    return max((i for i, fixture in enumerate(LANE_IMAGES) if fixture in fixturenames), default=0)


HANDOVER_SECONDS = 2.0
"""The pause between two builds: the lanes' fixtures waiting on the build lock (polled every 0.2 s) take it and
find their image built; without it this loop took the lock straight back, and the test bed's lane waited for all
three builds to find hvdflow-cpu (2026-11-27)."""

if __name__ == "__main__":
    for image in LANE_IMAGES.values():
        built = build_for_tests(image, Path(sys.argv[1]))
        print(f"{image}: {built.manifest_digest}", flush=True)
        time.sleep(HANDOVER_SECONDS)
