"""What the benchmarks run in a pipeline's working directory share (the demo's, after ``bash scripts/demo.sh``): the
options naming that tree's profile, image record and catalogue, and the runtime they give."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from hvdflow.config.profile import ClusterProfile, load_profile
from hvdflow.runtime import Runtime, runtime_for


def add_tree_options(parser: argparse.ArgumentParser) -> None:
    """``--profile``, ``--image-record`` and ``--catalog``, each defaulting to the tree's own."""
    parser.add_argument("--profile", type=Path, default=Path("profiles/local/hvdflow.yaml"))
    parser.add_argument("--image-record", type=Path, default=Path("resources/images/hvdflow-cpu.json"))
    parser.add_argument("--catalog", type=Path, default=Path("containers/catalog.yaml"))


def tree_profile(args: argparse.Namespace) -> ClusterProfile:
    """The profile ``--profile`` names."""
    return load_profile(args.profile)


def tree_runtime(args: argparse.Namespace, execmode: Optional[str] = None,
                 profile: Optional[Path] = None) -> Runtime:
    """The runtime of ``--profile`` (or ``profile``) with the image of ``--image-record``; with ``execmode``, the
    container of that udocker mode."""
    return runtime_for(load_profile(profile or args.profile).runtime, args.image_record, args.catalog, execmode)
