"""The pipeline's rule bodies: each takes the profile, the image record and paths, and logs to the rule's log."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, Mapping

from . import __version__
from .atomic import write_json_atomic
from .cache import sha256_file
from .catalog import get_image, load_catalog
from .images import ContainerRecord, ensure_container, pull_image
from .datasets import resolved_spec
from .pipeline import TrainSpec, evaluate, gather_dataset, list_dataset, prepare_chunk, train
from .profile import ClusterProfile
from .runtime import NativeRuntime, Runtime, UdockerRuntime
from .staging import read_reports
from .udocker import Udocker, allow_root_from_env


@contextmanager
def logged(log: Path) -> Iterator[None]:
    """Append this step's messages and errors to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        handle.write(f"[{time.strftime('%Y-%m-%dT%H:%M:%S')}] start\n")
        try:
            yield
        except BaseException as exc:
            handle.write(f"error: {exc}\n")
            raise
        handle.write(f"[{time.strftime('%Y-%m-%dT%H:%M:%S')}] done\n")


def pull_step(image: str, profile: ClusterProfile, catalog: Path, lock: Path, record_out: Path, log: Path) -> None:
    """Pull, verify and lock ``image``, create its container once, and write its record."""
    with logged(log):
        spec = get_image(load_catalog(catalog), image, catalog)
        udocker = Udocker(profile.udocker_dir, allow_root=allow_root_from_env())
        manifest = pull_image(udocker, spec, profile.registry, lock)
        record = ensure_container(udocker, spec, manifest, profile.execmode)
        record_out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(record_out, asdict(record))


def runtime_for(profile: ClusterProfile, image_record: Path, catalog: Path) -> Runtime:
    """The runtime the profile asks for, with the image the record names."""
    record = ContainerRecord(**json.loads(image_record.read_text()))
    if profile.runtime == "native":
        from .native import native_python

        return NativeRuntime(native_python(profile, record.image, catalog))
    return UdockerRuntime(Udocker(Path(record.udocker_dir), allow_root=allow_root_from_env()), record.container)


def list_step(name: str, entry: Mapping[str, Any], profile: ClusterProfile, catalog: Path, image_record: Path,
              manifest: Path, log: Path) -> None:
    """List dataset ``name``'s samples into the manifest directory, cut into the entry's number of chunks."""
    with logged(log):
        list_dataset(runtime_for(profile, image_record, catalog), resolved_spec(name, entry), entry["chunks"],
                     manifest.resolve(), log.resolve().with_suffix(".run.log"))


def chunk_step(chunk: int, profile: ClusterProfile, catalog: Path, image_record: Path, manifest: Path, out: Path,
               log: Path) -> None:
    """Prepare one chunk of a manifest into its shard directory."""
    with logged(log):
        prepare_chunk(runtime_for(profile, image_record, catalog), manifest.resolve(), chunk, out.resolve(),
                      log.resolve().with_suffix(".run.log"))


def gather_step(manifest: Path, chunks: list[Path], index: Path, log: Path) -> None:
    """Write the dataset's index from its chunks' reports."""
    with logged(log):
        gather_dataset(manifest.resolve(), [c.resolve() for c in chunks], index.parent.resolve())


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


def injected_failure() -> tuple[int, int, bool] | None:
    """Fault injection for tests: ``HVDFLOW_INJECT_RANK_FAILURE=RANK:EPOCH[:kill]`` makes that rank exit with status 3
    (or die of SIGKILL) after that epoch."""
    value = os.environ.get("HVDFLOW_INJECT_RANK_FAILURE")
    if not value:
        return None
    rank, epoch, *how = value.split(":")
    return int(rank), int(epoch), how == ["kill"]


def slurm_record(logs_dir: Path) -> dict[str, Any]:
    """The Slurm job a training ran in: job id, nodes, tasks per node, and what staging copied on each node."""
    reports = read_reports(logs_dir / "staging")
    first = reports[0]
    return {
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "cluster": os.environ.get("SLURM_CLUSTER_NAME"),
        "nodelist": first["SLURM_STEP_NODELIST"],
        "tasks_per_node": first["SLURM_STEP_TASKS_PER_NODE"],
        "staging": {r["hostname"]: {"bytes": r["bytes_copied"], "seconds": r["seconds"]}
                    for r in reports if r["bytes_copied"] is not None},
    }


def train_step(name: str, spec: Mapping[str, Any], config: Mapping[str, Any], profile: ClusterProfile,
               image_record: Path, index: Path, record_out: Path, log: Path) -> None:
    """Train experiment ``name``; write its run record last."""
    with logged(log):
        started = time.time()
        train_spec = TrainSpec(**{k: spec[k] for k in ("ranks", "model", "hidden_units", "epochs", "batch_size",
                                                        "learning_rate", "momentum", "warmup_epochs", "seed",
                                                        "nodes", "deterministic_allreduce", "shuffle_buffer")})
        out_dir = record_out.parent.resolve()
        results = train(runtime_for(profile, image_record, Path(config["catalog"])), profile.launcher, train_spec,
                        index.parent.resolve(), out_dir, logs_dir=log.resolve().with_suffix(""),
                        iface=profile.network_interface, fail=injected_failure(), slurm=profile.slurm)
        ended = time.time()
        image = json.loads(image_record.read_text())
        dataset_index = json.loads(index.read_text())
        shard_files = [index.parent / s["file"] for split in dataset_index["splits"].values() for s in split["shards"]]
        outputs = [record_out.parent / n for n in ("model.keras", "metrics.json", "history.csv")]
        record = {
            "experiment": name,
            "config": {"experiment": dict(spec), "dataset": dict(config["datasets"][spec["dataset"]]),
                       "catalog": config["catalog"], "lock": config["lock"]},
            "profile": {k: str(v) for k, v in asdict(profile).items()},
            "image": {"name": image["image"], "reference": image["reference"], "registry": image["registry"],
                      "digest": image["digest"], "container": image["container"], "execmode": image["execmode"]},
            "runtime": profile.runtime,
            "launcher": profile.launcher,
            "code": _git_revision(Path(__file__).resolve().parent),
            "seeds": {"training": spec["seed"], "split": config["datasets"][spec["dataset"]]["seed"]},
            "versions": {"tensorflow": results[0]["tensorflow"], "horovod": results[0]["horovod"],
                         "python_in_runtime": results[0]["python"], "python_host": platform.python_version(),
                         "hvdflow": __version__},
            "ranks": [{k: r[k] for k in ("rank", "local_rank", "cross_rank", "hostname", "cuda_visible_devices",
                                         "controller", "weights_sha256", "first_step_unix")} for r in results],
            "hosts": sorted({str(r["hostname"]) for r in results}),
            "slurm": slurm_record(log.resolve().with_suffix("")) if profile.slurm else None,
            "weights_sha256": results[0]["weights_sha256"],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ended)),
            "seconds": round(ended - started, 3),
            "inputs_sha256": _files_sha256([index, *shard_files]),
            "outputs_sha256": _files_sha256(outputs),
            "command": sys.argv,
        }
        write_json_atomic(record_out, record)


def evaluate_step(profile: ClusterProfile, catalog: Path, image_record: Path, model: Path, index: Path, out: Path,
                  log: Path) -> None:
    """Test-set metrics of a trained model."""
    with logged(log):
        evaluate(runtime_for(profile, image_record, catalog), model.resolve(), index.parent.resolve(), out.resolve(),
                 log.resolve().with_suffix(".run.log"))


# Rule bodies: Snakemake's `run:` blocks call these with the job's namespaces, so the rules stay one line long.

def pull_rule(wildcards: Any, input: Any, output: Any, log: Any, config: Mapping[str, Any], profile: ClusterProfile) -> None:
    """Rule pull_image."""
    pull_step(wildcards.image, profile, Path(input.catalog), Path(config["lock"]), Path(output.record), Path(log[0]))


def list_rule(wildcards: Any, input: Any, output: Any, log: Any, params: Any, config: Mapping[str, Any],
              profile: ClusterProfile) -> None:
    """Rule list_dataset."""
    list_step(wildcards.dataset, params.spec, profile, Path(config["catalog"]), Path(input.image),
              Path(output.manifest), Path(log[0]))


def chunk_rule(wildcards: Any, input: Any, output: Any, log: Any, config: Mapping[str, Any], profile: ClusterProfile) -> None:
    """Rule prepare_chunk."""
    chunk_step(int(wildcards.chunk), profile, Path(config["catalog"]), Path(input.image), Path(input.manifest),
               Path(output.chunk), Path(log[0]))


def gather_rule(input: Any, output: Any, log: Any) -> None:
    """Rule prepare_dataset (the gather)."""
    gather_step(Path(input.manifest), [Path(c) for c in input.chunks], Path(output.index), Path(log[0]))


def train_rule(wildcards: Any, input: Any, output: Any, log: Any, params: Any, config: Mapping[str, Any],
               profile: ClusterProfile) -> None:
    """Rule train."""
    train_step(wildcards.experiment, params.spec, config, profile, Path(input.image), Path(input.index),
               Path(output.record), Path(log[0]))


def evaluate_rule(input: Any, output: Any, log: Any, config: Mapping[str, Any], profile: ClusterProfile) -> None:
    """Rule evaluate."""
    evaluate_step(profile, Path(config["catalog"]), Path(input.image), Path(input.model), Path(input.index),
                  Path(output.evaluation), Path(log[0]))


def learning_curves_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_learning_curves."""
    from .plots import plot_learning_curves

    with logged(Path(log[0])):
        plot_learning_curves(Path(input.history), Path(output.plot), wildcards.experiment)


def confusion_matrix_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_confusion_matrix."""
    from .plots import plot_confusion_matrix

    with logged(Path(log[0])):
        plot_confusion_matrix(Path(input.evaluation), Path(output.plot), wildcards.experiment)


def per_class_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_per_class."""
    from .plots import plot_per_class

    with logged(Path(log[0])):
        plot_per_class(Path(input.evaluation), Path(output.plot), wildcards.experiment)
