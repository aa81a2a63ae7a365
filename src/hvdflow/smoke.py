"""The smoke job: N Horovod ranks train the digits MLP in the container and must end with identical weights."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from .errors import LaunchError
from .images import ContainerRecord
from .launch import launch_gloo_local, launch_mpi_local
from .rank_env import placements
from .udocker import Udocker

LAUNCHERS = ("gloo", "mpi")


def run_smoke(
    udocker: Udocker,
    record: ContainerRecord,
    launcher: str,
    ranks: int,
    out_dir: Path,
    epochs: int = 5,
    fail_rank: int = -1,
    timeout: float = 1800.0,
) -> dict[str, object]:
    """Train with ``ranks`` ranks through ``launcher``; write and return ``summary.json`` if all ranks agree."""
    if launcher not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHERS)}")
    if ranks < 1:
        raise LaunchError(f"ranks must be at least 1, got {ranks}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [out_dir / "summary.json", *out_dir.glob("rank-*.json")]:
        stale.unlink(missing_ok=True)
    command = ["python3", "-m", "hvdflow_trainer.smoke", "--out", str(out_dir), "--epochs", str(epochs),
               "--fail-rank", str(fail_rank)]
    if launcher == "gloo":
        launch_gloo_local(udocker, record.container, placements([(socket.gethostname(), ranks)]), command, out_dir, {}, timeout)
    else:
        launch_mpi_local(udocker, record.container, ranks, command, out_dir, {}, timeout)
    results = []
    for rank in range(ranks):
        path = out_dir / f"rank-{rank}.json"
        if not path.exists():
            raise LaunchError(f"rank {rank} exited 0 but wrote no result {path}; log: {out_dir / 'logs'}")
        results.append(json.loads(path.read_text()))
    hashes = sorted({r["weights_sha256"] for r in results})
    if len(hashes) != 1:
        raise LaunchError(f"ranks ended with different weights: {[r['weights_sha256'][:12] for r in results]}")
    summary: dict[str, object] = {
        "launcher": launcher,
        "ranks": ranks,
        "controller": results[0]["controller"],
        "weights_sha256": hashes[0],
        "accuracy_all_digits": results[0]["accuracy_all_digits"],
        "image": record.image,
        "reference": record.reference,
        "digest": record.digest,
        "container": record.container,
        "execmode": record.execmode,
        "tensorflow": results[0]["tensorflow"],
        "horovod": results[0]["horovod"],
    }
    tmp = out_dir / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out_dir / "summary.json")
    return summary
