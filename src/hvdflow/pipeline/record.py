"""The run record, ``results/<experiment>/run.json``: everything that explains and reproduces one training.

It names the image by digest, the resolved config and profile, the code (commit, dirty flag, where the host code was
imported from), seeds, versions, ranks and hosts, the Slurm job, and the sha256 of inputs and outputs.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from hvdflow import __version__, code_location
from hvdflow.config.profile import ClusterProfile
from hvdflow.files.cache import sha256_file
from hvdflow.slurm.staging import read_reports


def _git_revision(directory: Path) -> dict[str, Any]:
    """The commit of the checkout holding ``directory``, and whether tracked files differ from it.

    Files missing from the tree (a copy with only the parts the pipeline needs) do not make it dirty; changed or
    added ones do.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        changed = git("diff", "HEAD", "--name-only", "--diff-filter=ACMRT")
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(changed), "changed_files": changed.splitlines()}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None, "note": f"{directory} is not a git checkout"}


def _files_sha256(paths: list[Path]) -> dict[str, str]:
    """sha256 of each file, keyed by its path as given (relative to the working directory in the pipeline)."""
    return {str(p): sha256_file(p) for p in sorted(paths) if p.is_file()}


def slurm_record(logs_dir: Path) -> dict[str, Any]:
    """The Slurm job a training ran in: job id, nodes, tasks per node, what staging copied on each node, and where
    the job steps imported hvdflow from."""
    reports = read_reports(logs_dir / "staging")
    first = reports[0]
    return {
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "nodelist": first["SLURM_STEP_NODELIST"],
        "tasks_per_node": first["SLURM_STEP_TASKS_PER_NODE"],
        "staging": {r["hostname"]: {"bytes": r["bytes_copied"], "seconds": r["seconds"]}
                    for r in reports if r["bytes_copied"] is not None},
        "hvdflow_source": sorted({str(r["hvdflow_source"]) for r in reports}),
    }


def run_record(name: str, spec: Mapping[str, Any], config: Mapping[str, Any], profile: ClusterProfile,
               image_record: Path, index: Path, out_dir: Path, logs_dir: Path, results: list[dict[str, object]],
               started: float, ended: float) -> dict[str, Any]:
    """The record of experiment ``name``, trained into ``out_dir`` with ranks' ``results``."""
    image = json.loads(image_record.read_text())
    dataset_index = json.loads(index.read_text())
    shard_files = [index.parent / s["file"] for split in dataset_index["splits"].values() for s in split["shards"]]
    outputs = [out_dir / n for n in ("model.keras", "metrics.json", "history.csv")]
    record = {
        "experiment": name,
        "config": {"experiment": dict(spec), "dataset": dict(config["datasets"][spec["dataset"]]),
                   "catalog": config["catalog"], "lock": config["lock"]},
        "profile": {k: str(v) for k, v in asdict(profile).items()},
        "image": {"name": image["image"], "reference": image["reference"], "registry": image["registry"],
                  "digest": image["digest"], "container": image["container"], "execmode": image["execmode"]},
        "runtime": profile.runtime,
        "launcher": profile.launcher,
        "code": {**_git_revision(code_location()), "hvdflow_source": str(code_location())},
        "seeds": {"training": spec["seed"], "split": config["datasets"][spec["dataset"]]["seed"]},
        "versions": {"tensorflow": results[0]["tensorflow"], "horovod": results[0]["horovod"],
                     "python_in_runtime": results[0]["python"], "python_host": platform.python_version(),
                     "hvdflow": __version__},
        "ranks": [{k: r[k] for k in ("rank", "local_rank", "cross_rank", "hostname", "cuda_visible_devices", "cpus",
                                     "threads", "controller", "weights_sha256", "first_step_unix")} for r in results],
        "cpu_bind": profile.cpu_bind,
        "hosts": sorted({str(r["hostname"]) for r in results}),
        "slurm": slurm_record(logs_dir) if profile.slurm else None,
        "weights_sha256": results[0]["weights_sha256"],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
        "seconds": round(ended - started, 3),
        "inputs_sha256": _files_sha256([index, *shard_files]),
        "outputs_sha256": _files_sha256(outputs),
        "command": sys.argv,
    }
    return record
