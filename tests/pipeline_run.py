"""A user-owned copy of the workflow tree where the ordinary user runs Snakemake (shared by the end-to-end tests)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import time
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from types import MappingProxyType

import h5py
import jsonschema
import numpy as np
import yaml

from conftest import REPO, HpcUser, Registry, _chown_tree

TREE = ("src", "containers", "workflow", "config", "profiles", "examples")
PNG = b"\x89PNG\r\n\x1a\n"
RECORD_SCHEMA = REPO / "workflow" / "schemas" / "run-record.schema.yaml"


@cache
def _record_validator() -> jsonschema.Draft202012Validator:
    schema = yaml.safe_load(RECORD_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def check_run_record(path: Path) -> dict:  # type: ignore[type-arg]
    """``path`` (a run.json), read and validated against the record's JSON schema: AssertionError naming each
    violation."""
    record = json.loads(path.read_text())
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
              for e in _record_validator().iter_errors(record)]
    assert not errors, f"{path} does not match {RECORD_SCHEMA.name}:\n" + "\n".join(errors[:20])
    return record


def processes_naming(path: Path) -> list[str]:
    """Live processes whose command line names ``path``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(path) in text and state not in ("Z", "X"):
            found.append(f"{cmdline.parent.name}: {text[:300]}")
    return found


TMP_LEFTOVERS = ("udocker-*", "__autograph_generated_file*")
"""What a run's processes may make in the node's /tmp and must not leave there: udocker's per-run copies of passwd and
group and R1's bundle and bind folders, TensorFlow's AutoGraph files (a killed rank's stay)."""


def tmp_leftovers(uid: int, since: float, tmp: Path = Path("/tmp")) -> list[str]:
    """The entries of :data:`TMP_LEFTOVERS` that user ``uid`` made in ``tmp`` at or after ``since`` (epoch seconds)
    and that are still there."""
    found = []
    for pattern in TMP_LEFTOVERS:
        for path in tmp.glob(pattern):
            try:
                info = path.lstat()
            except OSError:
                continue
            if info.st_uid == uid and info.st_mtime >= since:
                found.append(path.name)
    return sorted(found)


class Pipeline:
    """A user-owned copy of the tree where the user runs Snakemake."""

    def __init__(self, user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline | None = None) -> None:
        """A fresh tree; with ``prepared``, that tree's ``resources/`` (image records, prepared datasets) and
        Snakemake's records of them come along, so that only the rules after the preparation run here (shared set-up
        for the tests of training; the preparation has tests of its own)."""
        self.user, self.registry, self.udocker_dir = user, registry, udocker_dir
        self.root = user.tests_dir / f"pipeline-{uuid.uuid4().hex[:8]}"
        self.root.mkdir(parents=True)
        for part in TREE:
            shutil.copytree(user.workspace / part, self.root / part)
        if prepared is not None:
            shutil.copytree(prepared.root / "resources", self.root / "resources")
            shutil.copytree(prepared.root / ".snakemake" / "metadata", self.root / ".snakemake" / "metadata")
        if (REPO / ".git").is_dir():
            shutil.copytree(REPO / ".git", self.root / ".git")  # so the run record names the commit
            shutil.copy2(REPO / ".gitignore", self.root / ".gitignore")  # and git sees the checkout's ignore rules
        _chown_tree(self.root, user.uid, user.gid)

    def _as_user(self, argv: list[str], extra_env: Mapping[str, str]) -> list[str]:
        """``argv`` run as the user in a clean environment with the tree's registry and udocker directory."""
        env = {"HVDFLOW_REGISTRY": self.registry.url, "HVDFLOW_UDOCKER_DIR": str(self.udocker_dir), **extra_env}
        return ["runuser", "-u", self.user.name, "--", "env", "-i", *[f"{k}={v}" for k, v in self.user.env(env).items()],
                *argv]

    def start_snakemake(self, *args: str, profile: str = "local", extra_env: Mapping[str, str] = MappingProxyType({}),
                        wrapper: Sequence[str] = ()) -> subprocess.Popen[str]:
        """Start ``snakemake --profile profiles/<profile> ARGS`` as the user in the tree (under ``wrapper``, a command
        that runs the rest of its command line), its output piped.

        It runs in a process group of its own, as a terminal's foreground job does, so a test can send it Ctrl-C.
        """
        argv = [*wrapper, str(self.user.venv / "bin" / "snakemake"), "--profile", f"profiles/{profile}", *args]
        return subprocess.Popen(self._as_user(argv, extra_env), cwd=self.root, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, start_new_session=True)

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        """Wait for a started Snakemake (killing it after ``timeout``); its output."""
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    def hvdflow(self, *args: str, extra_env: Mapping[str, str] = MappingProxyType({})) -> subprocess.CompletedProcess[str]:
        """Run ``hvdflow ARGS`` as the user in the tree, with the registry and udocker directory of its runs."""
        return subprocess.run(self._as_user([str(self.user.venv / "bin" / "python"), "-m", "hvdflow", *args], extra_env),
                              cwd=self.root, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)

    def snakemake(self, *args: str, profile: str = "local", extra_env: Mapping[str, str] = MappingProxyType({}),
                  wrapper: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
        """Run ``snakemake --profile profiles/<profile> ARGS`` as the user in the tree (under ``wrapper``); capture its
        output. Every run record the tree then holds must match the record's schema."""
        proc = self.finish(self.start_snakemake(*args, profile=profile, extra_env=extra_env, wrapper=wrapper))
        for record in self.root.glob("results/*/run.json"):
            check_run_record(record)
        return proc

    def processes(self) -> list[str]:
        """Live processes whose command line names this tree (ranks, rendezvous servers, proot): none may outlive
        a run."""
        return processes_naming(self.root)

    def processes_left(self, seconds: float = 30) -> list[str]:
        """:meth:`processes` once they have had ``seconds`` to exit: a Slurm job's own Snakemake may still be exiting
        when the plugin has seen the job end. What is left after that outlived the run."""
        deadline = time.monotonic() + seconds
        found = self.processes()
        while found and time.monotonic() < deadline:
            time.sleep(0.5)
            found = self.processes()
        return found

    def json(self, rel: str) -> dict:  # type: ignore[type-arg]
        """A JSON file of the tree (a run record checked against its schema)."""
        path = self.root / rel
        return check_run_record(path) if path.name == "run.json" else json.loads(path.read_text())


def configured_pipeline(user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline | None,
                        **sections: object) -> Pipeline:
    """A tree (started from ``prepared`` when given) whose config has ``sections`` in place of its own."""
    pipeline = Pipeline(user, registry, udocker_dir, prepared)
    config_file = pipeline.root / "config" / "config.yaml"
    config = yaml.safe_load(config_file.read_text())
    config.update(sections)
    config_file.write_text(yaml.safe_dump(config))
    return pipeline


def benchmark_pipeline(user: HpcUser, registry: Registry, udocker_dir: Path, prepared: Pipeline,
                       **section: object) -> Pipeline:
    """A tree started from ``prepared`` (image pulled) whose config's ``benchmark:`` is the small smoke one with
    ``section``'s keys changed."""
    return configured_pipeline(user, registry, udocker_dir, prepared, benchmark={
        "image": "hvdflow-cpu", "models": ["mlp"], "ranks": [1, 2], "nodes": [1], "runtimes": ["udocker"],
        "repetitions": 1, "warmup_steps": 3, "steps": 20, "min_seconds": 1, "allreduce_sizes_kib": [1, 1024],
        **section})


def model_weights(model: Path) -> list[np.ndarray]:
    """The weight arrays of a saved ``model.keras`` (a zip holding ``model.weights.h5``), in the file's order."""
    arrays: list[np.ndarray] = []
    with zipfile.ZipFile(model) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as h5:
        h5.visititems(lambda _, item: arrays.append(item[()]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def max_weight_difference(a: Path, b: Path) -> float:
    """The largest absolute difference between two saved models' weights (of the same architecture)."""
    pairs = list(zip(model_weights(a), model_weights(b), strict=True))
    assert pairs and all(x.shape == y.shape for x, y in pairs)
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in pairs)


def read_table(pipeline: Pipeline) -> dict[tuple[str, int, int, str, str, int], dict[str, str]]:
    """The benchmark's table.csv by (kind, ranks, nodes, runtime, metric, size_bytes)."""
    with open(pipeline.root / "results/benchmark/table.csv", newline="") as handle:
        return {(r["kind"], int(r["ranks"]), int(r["nodes"]), r["runtime"], r["metric"], int(r["size_bytes"])): r
                for r in csv.DictReader(handle)}
