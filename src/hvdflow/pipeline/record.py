"""The run record, ``results/<experiment>/run.json``: everything that explains and reproduces one training.

JSON all the way down, in the shape ``workflow/schemas/run-record.schema.json`` documents (``record_version``). It
names the image by digest, the resolved config and profile, the code (commit, dirty flag and the diff's sha256, where
the host code was imported from), seeds, every version (TensorFlow, Horovod, Python, hvdflow, udocker, the proot
engine, Slurm), each machine's CPU model and flags and the settings that fix the order of floating-point sums, ranks
and hosts with their cores and threads, the Slurm job and allocation, the sha256 of inputs and outputs, and the
metrics of every epoch.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from hvdflow import __version__
from hvdflow.code_location import code_location
from hvdflow.config.datasets import USER_READER, source_name
from hvdflow.config.profile import ClusterProfile
from hvdflow.config.user_code import UserModel, code_files, tree_sha256
from hvdflow.files.cache import sha256_file
from hvdflow.images.lockfile import read_lock
from hvdflow.launch.elastic import read_events, timeline
from hvdflow.runtime import recorded_engine
from hvdflow.slurm.jobinfo import allocation, current_job
from hvdflow.slurm.staging import read_reports
from hvdflow_index import content_sha256
from hvdflow_wire.rank import RankResult
from hvdflow_wire.values import to_json

RECORD_VERSION = 3
"""The shape of run.json; raised whenever a key changes meaning, goes away or becomes required (3: every rank's
``usage`` and ``step_times``)."""


def _git_revision(directory: Path) -> dict[str, Any]:
    """The commit of the checkout holding ``directory``, whether tracked files differ from it, and the sha256 of
    that difference (``git diff HEAD --binary``).

    Files missing from the tree (a copy with only the parts the pipeline needs) do not make it dirty; changed or
    added ones do.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, check=True).stdout

    try:
        changed = git("diff", "HEAD", "--name-only", "--diff-filter=ACMRT").splitlines()
        diff = git("diff", "HEAD", "--binary", "--diff-filter=ACMRT") if changed else ""
        return {"commit": git("rev-parse", "HEAD").strip(), "dirty": bool(changed), "changed_files": changed,
                "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if changed else None}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None, "changed_files": [], "diff_sha256": None,
                "note": f"{directory} is not a git checkout"}


def _code_as_it_ran(folder: str, path: Path) -> dict[str, Any]:
    """A folder of the user's code as it ran: the folder as the config names it, where it was, every file's sha256,
    their tree hash, and the git state of the checkout holding it (a folder inside the workflow's checkout is covered
    by its commit)."""
    files = code_files(path)
    return {"folder": folder, "path": str(path), "files": files, "tree_sha256": tree_sha256(files),
            "git": _git_revision(path)}


def _user_code(spec: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """A user's own model's or training script's code as it ran (:func:`_code_as_it_ran`); None for a built-in
    model."""
    model = spec.get("model")
    if not isinstance(model, Mapping):
        return None
    user = UserModel.from_config("model", model, Path.cwd())
    return {**_code_as_it_ran(str(model["code"]), user.code), "build": user.build, "script": user.script}


def _reader_code(dataset: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The dataset's own reader's code as it ran (:func:`_code_as_it_ran`); None for a built-in source."""
    if source_name(dataset) != USER_READER:
        return None
    folder = str(dataset["source"]["code"])
    return _code_as_it_ran(folder, Path(folder).resolve())


def jsonable(value: Any) -> Any:
    """``value`` with dataclasses, paths and tuples turned into JSON's objects, strings and arrays."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _package_version(name: str) -> Optional[str]:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _slurm_version() -> Optional[str]:
    """Slurm's version as its clients report it (``slurm 22.05.8``), or None."""
    try:
        proc = subprocess.run(["scontrol", "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def epoch_metrics(history_csv: Path) -> list[dict[str, float]]:
    """The metrics of every epoch from ``history.csv`` (``epoch`` counted from 0, as Keras writes it)."""
    if not history_csv.is_file():
        return []
    with open(history_csv, newline="") as handle:
        return [{key: float(value) for key, value in row.items() if value != ""} for row in csv.DictReader(handle)]


def _machines(results: Sequence[RankResult]) -> dict[str, Any]:
    """Each host's CPU, GPUs and driver, as its first rank saw them."""
    machines: dict[str, Any] = {}
    for result in results:
        machines.setdefault(result.hostname, result.machine)
    return machines


def _files_sha256(paths: list[Path]) -> dict[str, str]:
    """sha256 of each file, keyed by its path as given (relative to the working directory in the pipeline)."""
    return {str(p): sha256_file(p) for p in sorted(paths) if p.is_file()}


def slurm_record(logs_dir: Path) -> dict[str, Any]:
    """The Slurm job a training ran in: job id, its allocation as the controller tells it (the plugin's job step
    hides the allocation's variables), nodes, tasks per node, what staging copied on each node, and where the job
    steps imported hvdflow from."""
    reports = read_reports(logs_dir / "staging")
    first = reports[0]
    job = current_job()
    return {
        "job_id": job,
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "allocation": allocation(job),
        "nodelist": first.step_nodelist,
        "tasks_per_node": first.step_tasks_per_node,
        "staging": {r.hostname: {"bytes": r.bytes_copied, "seconds": r.seconds}
                    for r in reports if r.bytes_copied is not None},
        "hvdflow_source": sorted({r.hvdflow_source for r in reports}),
    }


def image_check_path(image_record: Path) -> Path:
    """Where the pull wrote the image's check (``hvdflow image check``) beside its record."""
    return image_record.with_name(f"{image_record.stem}.check.json")


def run_record(name: str, spec: Mapping[str, Any], config: Mapping[str, Any], profile: ClusterProfile,
               image_record: Path, index: Path, out_dir: Path, logs_dir: Path, results: Sequence[RankResult],
               started: float, ended: float) -> dict[str, Any]:
    """The record of experiment ``name``, trained into ``out_dir`` with ranks' ``results``."""
    image = json.loads(image_record.read_text())
    dataset_index = json.loads(index.read_text())
    shard_files = [index.parent / s["file"] for split in dataset_index["splits"].values() for s in split["shards"]]
    outputs = [*(out_dir / "model").iterdir(), out_dir / "metrics.json", out_dir / "history.csv"]
    record = {
        "record_version": RECORD_VERSION,
        "experiment": name,
        "config": jsonable({"experiment": spec, "dataset": config["datasets"][spec["dataset"]],
                            "catalog": config["catalog"], "lock": config["lock"]}),
        "profile": jsonable(profile),
        "image_lock": {name: {"reference": e.reference, "digest": e.digest}
                       for name, e in sorted(read_lock(Path(config["lock"])).items())},
        "image": {"name": image["image"], "reference": image["reference"], "registry": image["registry"],
                  "digest": image["digest"], "container": image["container"], "execmode": image["execmode"],
                  "runc_container": image.get("runc_container")},
        "image_check": json.loads(image_check_path(image_record).read_text()),
        "runtime": profile.runtime.kind,
        "launcher": profile.launcher,
        "code": {**_git_revision(code_location()), "hvdflow_source": str(code_location())},
        "user_code": _user_code(spec),
        "reader_code": _reader_code(config["datasets"][spec["dataset"]]),
        "seeds": {"training": spec["seed"], "split": config["datasets"][spec["dataset"]]["seed"]},
        "versions": {"framework": results[0].framework, "distributed": results[0].distributed,
                     "tensorflow": results[0].tensorflow,
                     "torch": results[0].framework_version if results[0].framework == "torch" else "none",
                     "horovod": results[0].horovod,
                     "python_in_runtime": results[0].python, "python_host": platform.python_version(),
                     "hvdflow": __version__, "udocker": _package_version("udocker"),
                     "snakemake": _package_version("snakemake"),
                     "slurm": _slurm_version() if profile.slurm else None},
        "proot": recorded_engine(profile.runtime, image),
        "machines": _machines(results),
        "numerics": results[0].numerics,
        "ranks": [{**{k: getattr(r, k) for k in ("rank", "local_rank", "cross_rank", "hostname", "cuda_visible_devices",
                                                 "cpus", "threads", "controller", "weights_sha256", "first_step_unix",
                                                 "execmode")},
                   "usage": to_json(r.usage), "step_times": to_json(r.step_times)}
                  for r in results],
        "cpu_bind": profile.cpu_bind,
        "hosts": sorted({r.hostname for r in results}),
        "slurm": slurm_record(logs_dir) if profile.slurm else None,
        "weights_sha256": results[0].weights_sha256,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
        "seconds": round(ended - started, 3),
        "inputs_sha256": _files_sha256([index, *shard_files]),
        "dataset_index_content_sha256": content_sha256(dataset_index),
        "outputs_sha256": _files_sha256(outputs),
        "history": epoch_metrics(out_dir / "history.csv"),
        "elastic": ({"min_ranks": spec["elastic"]["min_ranks"], "max_ranks": spec["elastic"].get("max_ranks", spec["ranks"]),
                     **timeline(read_events(logs_dir))} if spec.get("elastic") else None),
        "command": sys.argv,
    }
    return record
