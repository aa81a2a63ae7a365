"""The rule bodies: Snakemake's ``run:`` blocks call one function here, which calls one stage and logs to the rule's log."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from hvdflow.config.benchmark import BenchmarkSpec, Measurement, runtime_kind
from hvdflow.config.datasets import resolved_spec
from hvdflow.config.experiment import TrainSpec
from hvdflow.config.profile import ClusterProfile
from hvdflow.config.user_code import UserModel
from hvdflow.errors import ImageError, LaunchError, RegistryUnreachable, RunStopped
from hvdflow.files.atomic import write_json_atomic
from hvdflow.files.heartbeat import file_size, fresh_last_line, heartbeat, last_line
from hvdflow.images.catalog import ImageSpec, get_image, load_catalog
from hvdflow.images.modes import AUTO_MODE
from hvdflow.images.offline import NO_REGISTRY
from hvdflow.images.runc_probe import probe_runc_mode
from hvdflow.launch import faults
from hvdflow.launch.image_check import ImageCheck, check_image, needs_of, refusal, table
from hvdflow.launch.supervise import note
from hvdflow.pipeline.benchmark import measure, read_rows, summarize
from hvdflow.pipeline.record import run_record
from hvdflow.pipeline.resume import identity_of, load_attempts
from hvdflow.pipeline.stages import (
    CHECKPOINTS,
    check_user_model,
    elastic_settings,
    evaluate,
    gather_dataset,
    list_dataset,
    prepare_chunk,
    train,
)
from hvdflow.runtime import ImageStore, RuntimeSettings, as_kind, make_runtime, runtime_for, setup_log, store_of
from hvdflow.runtime.record import ContainerRecord
from hvdflow.slurm.requeue import requeue_or_explain
from hvdflow_wire.user_code import USER_CODE_WARNING


@contextmanager
def logged(log: Path, detail: Optional[Callable[[], str]] = None) -> Iterator[None]:
    """Append this step's messages and errors to ``log``, and while it runs a progress line at least every 30 s
    (:func:`hvdflow.files.heartbeat.heartbeat`: the time so far and ``detail()``, what the step can say of itself)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as handle:
        handle.write(f"[{time.strftime('%Y-%m-%dT%H:%M:%S')}] start\n")
        handle.flush()  # the step may append its own lines (progress) while this handle is open
        try:
            with heartbeat(lambda line: note(log, line), f"{log.parent.name} {log.stem}", detail):
                yield
        except BaseException as exc:
            handle.write(f"error: {exc}\n")
            raise
        handle.write(f"[{time.strftime('%Y-%m-%dT%H:%M:%S')}] done\n")


def runtime_setup_detail(settings: RuntimeSettings, image_record: Path) -> Optional[Callable[[], str]]:
    """A progress detail for a step whose runtime sets itself up at length (the native venv's first creation compiles
    Horovod for minutes): the newest line of that set-up's log while it is being written; None where the runtime
    has no such set-up."""
    log = setup_log(settings, str(json.loads(image_record.read_text())["image"]))
    if log is None:
        return None
    before = file_size(log)
    return lambda: (f"{settings.kind} runtime set-up: " + line) if (line := fresh_last_line(log, before)) else ""


def run_log_tail(log: Path) -> Callable[[], str]:
    """A progress detail: the last line the step's program wrote to its run log (``<log>.run.log``)."""
    return lambda: last_line(log.resolve().with_suffix(".run.log"))


def pull_step(image: str, profile: ClusterProfile, catalog: Path, lock: Path, record_out: Path, check_out: Path,
              purposes: Sequence[str], sources: Sequence[str], log: Path, frameworks: Sequence[str] = ("tensorflow",)
              ) -> None:
    """Pull, verify and lock ``image`` (with no registry: take the loaded image the lock pins, verified), create its
    container once, check that it holds what the workflow's jobs need of it (``hvdflow image check``, cached by
    digest), and write its record and the check's; an image that lacks a part is refused here, before any job."""
    store = store_of(profile.runtime)
    with logged(log, store.progress):
        spec = get_image(load_catalog(catalog), image, catalog)
        record = _pulled(store, spec, profile, lock, log)
        if record.execmode == AUTO_MODE:
            note(log, f"hvdflow: execmode auto: containers {record.container} (P1) and "
                 + (f"{record.runc_container} (R1)" if record.runc_container else
                    f"no R1 container, because {probe_runc_mode().cause()}")
                 + "; each rank chooses on its own node (its log says which)")
        # the image is checked in udocker, whichever runtime the profile's jobs use
        runtime = make_runtime(as_kind(profile.runtime, "udocker", profile.launcher), record, catalog)
        # CUDA and NCCL are asked of a GPU image only: a CPU image may run on GPU nodes (on their CPUs)
        checks = [check_image(runtime, record.digest, store.checks_dir,
                              needs_of(purposes, profile.launcher, spec.device == "gpu", sources, framework))
                  for framework in frameworks or ("tensorflow",)]
        check = ImageCheck(checks[0].digest, checks[0].facts, [part for c in checks for part in c.parts])
        with open(log, "a") as handle:
            handle.write(table(image, record.digest, check.parts))
        problem = refusal(image, check.parts)
        if problem is not None:
            raise ImageError(problem)
        record_out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(check_out, check.to_json())
        write_json_atomic(record_out, asdict(record))


def _pulled(store: ImageStore, spec: ImageSpec, profile: ClusterProfile, lock: Path, log: Path) -> ContainerRecord:
    """The image's container: pulled (or loaded) and verified against the lock, then created once. Where the
    registry cannot be reached at all, the container made earlier from the pinned digest serves, said in the log."""
    if profile.registry == NO_REGISTRY:
        return store.create(spec, store.loaded(spec, lock), profile.runtime.execmode)
    try:
        return store.create(spec, store.pull(spec, profile.registry, lock), profile.runtime.execmode)
    except RegistryUnreachable as unreachable:
        record = store.pinned(spec, lock, profile.runtime.execmode)
        if record is None:
            raise
        note(log, f"hvdflow: {unreachable}; using container {record.container}, made from the pinned digest "
             f"{record.digest} (its layers were verified against it when it was pulled)")
        return record


def list_step(name: str, entry: Mapping[str, Any], profile: ClusterProfile, catalog: Path, image_record: Path,
              manifest: Path, log: Path) -> None:
    """List dataset ``name``'s samples into the manifest directory, cut into the entry's number of chunks."""
    with logged(log, run_log_tail(log)):
        list_dataset(runtime_for(profile.runtime, image_record, catalog), resolved_spec(name, entry), entry["chunks"],
                     manifest.resolve(), log.resolve().with_suffix(".run.log"), profile.step_timeout)


def chunk_step(chunk: int, profile: ClusterProfile, catalog: Path, image_record: Path, manifest: Path, out: Path,
               log: Path) -> None:
    """Prepare one chunk of a manifest into its shard directory (its program reports the samples done)."""
    with logged(log, run_log_tail(log)):
        prepare_chunk(runtime_for(profile.runtime, image_record, catalog), manifest.resolve(), chunk, out.resolve(),
                      log.resolve().with_suffix(".run.log"), profile.step_timeout)


def gather_step(manifest: Path, chunks: list[Path], index: Path, log: Path) -> None:
    """Write the dataset's index from its chunks' reports."""
    with logged(log):
        gather_dataset(manifest.resolve(), [c.resolve() for c in chunks], index.parent.resolve())


def train_step(name: str, spec: Mapping[str, Any], config: Mapping[str, Any], profile: ClusterProfile,
               image_record: Path, index: Path, record_out: Path, log: Path) -> None:
    """Train experiment ``name``; write its run record last.

    A run stopped on a signal (a checkpoint saved) inside a Slurm job requeues the job, which resumes it; where Slurm
    refuses, or outside Slurm, the step fails so that the rule's retries (or the next call) resume it.
    ``HVDFLOW_INJECT_RANK_FAILURE`` makes a rank fail on purpose (for tests: :mod:`hvdflow.launch.faults`).
    """
    with logged(log, runtime_setup_detail(profile.runtime, image_record)):
        started = time.time()
        out_dir, logs_dir = record_out.parent.resolve(), log.resolve().with_suffix("")
        digest = str(json.loads(image_record.read_text())["digest"])
        try:
            train_spec = TrainSpec.from_config(spec)
            results = train(runtime_for(profile.runtime, image_record, Path(config["catalog"])), profile.launcher,
                            train_spec, index.parent.resolve(), out_dir, logs_dir,
                            identity_of(spec, digest, index), iface=profile.network_interface,
                            fail=faults.injected_rank_failure(),
                            slow_steps=faults.injected_slow_steps(), slurm=profile.slurm,
                            timeout=profile.step_timeout, progress=log.resolve(), cpu_bind=profile.cpu_bind,
                            elastic=elastic_settings(train_spec, profile))
        except RunStopped as stopped:
            if profile.slurm is not None:
                requeue_or_explain(stopped, log.resolve())
            raise
        record = run_record(name, spec, config, profile, image_record, index, record_out.parent, logs_dir, results,
                            started, time.time())
        record["attempts"] = load_attempts(out_dir / CHECKPOINTS)
        write_json_atomic(record_out, record)


def evaluate_step(profile: ClusterProfile, catalog: Path, image_record: Path, model: Path, index: Path, out: Path,
                  log: Path, user: Optional[UserModel] = None) -> None:
    """Test-set metrics of a trained model (a user's own: its code imported first, for its custom layers)."""
    with logged(log, run_log_tail(log)):
        evaluate(runtime_for(profile.runtime, image_record, catalog), model.resolve(), index.parent.resolve(), out.resolve(),
                 log.resolve().with_suffix(".run.log"), profile.step_timeout, user)


def benchmark_measure_step(measurement: Measurement, spec: BenchmarkSpec, profile: ClusterProfile, catalog: Path,
                           image_record: Path, out: Path, log: Path) -> None:
    """One benchmark measurement in its runtime (udocker in the profile's mode or the one the runtime names, or the
    native venv of the same image's packages)."""
    kind, mode = runtime_kind(measurement.runtime)
    settings = as_kind(profile.runtime, kind, profile.launcher)
    with logged(log, runtime_setup_detail(settings, image_record)):
        runtime = runtime_for(settings, image_record, catalog, mode)
        measure(runtime, profile.launcher, spec, measurement, out.resolve(), log.resolve().with_suffix(""),
                profile.slurm, profile.network_interface, profile.step_timeout, log.resolve(), profile.cpu_bind)


def benchmark_summary_step(measurements: Sequence[Path], table: Path, summary: Path, log: Path) -> None:
    """The benchmark's table and summary; each goal's line (met, or missed by how much) in the log."""
    with logged(log):
        lines = summarize(list(measurements), table, summary)
        with open(log, "a") as handle:
            handle.write("".join(f"{line}\n" for line in lines))


# Rule bodies: Snakemake's `run:` blocks call these with the job's namespaces, so the rules stay one line long.

def pull_rule(wildcards: Any, input: Any, output: Any, log: Any, params: Any, config: Mapping[str, Any],
              profile: ClusterProfile) -> None:
    """Rule pull_image."""
    pull_step(wildcards.image, profile, Path(input.catalog), Path(config["lock"]), Path(output.record),
              Path(output.check), params.needs["purposes"], params.needs["sources"], Path(log[0]),
              params.needs["frameworks"])


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


def check_model_rule(input: Any, output: Any, log: Any, params: Any, config: Mapping[str, Any],
                     profile: ClusterProfile) -> None:
    """Rule check_model: a user's own model built once on the prepared dataset's shape, before any training job."""
    with logged(Path(log[0])):
        spec = TrainSpec.from_config(params.spec)
        user = spec.user_model(f"experiments.{params.name}.model")
        if user is None:
            raise LaunchError(f"experiment {params.name} trains a built-in model; there is no code to check")
        run_log = Path(log[0]).resolve().with_suffix(".run.log")
        built = check_user_model(runtime_for(profile.runtime, Path(input.image), Path(config["catalog"])), user,
                                 Path(input.index).parent.resolve(), Path(output.check).resolve(), run_log,
                                 profile.step_timeout, spec.deterministic, spec.framework)
        print(f"hvdflow: {user.entry} of {user.code}: {built.summary}")
        for line in run_log.read_text(errors="replace").splitlines():
            if line.startswith(USER_CODE_WARNING):  # the check's warnings (random ops a resume cannot continue) where users look
                print(line)
                note(Path(log[0]), line)


def evaluate_rule(input: Any, output: Any, log: Any, params: Any, config: Mapping[str, Any],
                  profile: ClusterProfile) -> None:
    """Rule evaluate."""
    evaluate_step(profile, Path(config["catalog"]), Path(input.image), Path(input.model), Path(input.index),
                  Path(output.evaluation), Path(log[0]), TrainSpec.from_config(params.spec).user_model())


def record_page_rule(input: Any, output: Any, log: Any) -> None:
    """Rule record_page: the run record as a page of the report."""
    from hvdflow.pipeline.record_page import write_record_page

    with logged(Path(log[0])):
        write_record_page(Path(input.record), Path(output.page))


def learning_curves_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_learning_curves."""
    from hvdflow.pipeline.plots import plot_learning_curves

    with logged(Path(log[0])):
        plot_learning_curves(Path(input.history), Path(output.plot), wildcards.experiment)


def membership_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_membership."""
    from hvdflow.pipeline.plots import plot_membership

    with logged(Path(log[0])):
        plot_membership(Path(input.record), Path(output.plot), wildcards.experiment)


def allocation_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_allocation."""
    from hvdflow.pipeline.plots import plot_allocation

    with logged(Path(log[0])):
        plot_allocation(Path(input.record), Path(output.plot), wildcards.experiment)


def confusion_matrix_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_confusion_matrix."""
    from hvdflow.pipeline.plots import plot_confusion_matrix

    with logged(Path(log[0])):
        plot_confusion_matrix(Path(input.evaluation), Path(output.plot), wildcards.experiment)


def per_class_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule plot_per_class."""
    from hvdflow.pipeline.plots import plot_per_class

    with logged(Path(log[0])):
        plot_per_class(Path(input.evaluation), Path(output.plot), wildcards.experiment)


def benchmark_measure_rule(wildcards: Any, input: Any, output: Any, log: Any, config: Mapping[str, Any],
                           profile: ClusterProfile, spec: BenchmarkSpec) -> None:
    """Rule benchmark_measure."""
    measurement = Measurement(wildcards.kind, int(wildcards.ranks), int(wildcards.nodes), wildcards.runtime,
                              int(wildcards.rep))
    benchmark_measure_step(measurement, spec, profile, Path(config["catalog"]), Path(input.image),
                           Path(output.measurement), Path(log[0]))


def benchmark_summary_rule(input: Any, output: Any, log: Any) -> None:
    """Rule benchmark_summary."""
    benchmark_summary_step([Path(p) for p in input.measurements], Path(output.table), Path(output.summary),
                           Path(log[0]))


def benchmark_plot_rule(wildcards: Any, input: Any, output: Any, log: Any) -> None:
    """Rule benchmark_plot: one of the benchmark's figures."""
    from hvdflow.pipeline import benchmark_plots

    with logged(Path(log[0])):
        getattr(benchmark_plots, f"plot_{wildcards.plot}")(read_rows(Path(input.summary)), Path(output.plot))
