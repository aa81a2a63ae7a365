"""The workflow parses, lints and dry-runs with every shipped profile; bad config and profiles are named."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError

from conftest import REPO, environ_with_slurm_client
from hvdflow.config.parse_time import check_workflow_config
from hvdflow.errors import HvdflowError

PROFILES = sorted(p.name for p in (REPO / "profiles").iterdir() if (p / "config.yaml").exists())
BIN = Path(sys.executable).parent


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the workflow, config, profiles, catalogue and code to run Snakemake in."""
    for part in ("workflow", "config", "profiles", "containers", "src"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "images.lock.yaml"))
    return tmp_path


DRY_RUN_ENV = {"HVDFLOW_REGISTRY": "http://127.0.0.1:5999", "HVDFLOW_ALLOW_ROOT": "1"}
"""What the profiles' variables are set to for the parse-time runs."""


def snakemake(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**environ_with_slurm_client(), **DRY_RUN_ENV}
    return subprocess.run([str(BIN / "snakemake"), *args], cwd=tree, env=env, capture_output=True, text=True, timeout=300)


def test_lint_and_snakefmt_are_clean(tree: Path) -> None:
    lint = snakemake(tree, "--profile", "profiles/local", "--lint")
    assert lint.returncode == 0 and "Congratulations, your workflow is in a good condition!" in lint.stdout + lint.stderr
    fmt = subprocess.run([str(BIN / "snakefmt"), "--check", str(REPO / "workflow")], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stderr


def test_ruff_is_clean_over_the_code_tests_and_benchmarks() -> None:
    proc = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "src", "tests", "benchmarks"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("profile", PROFILES)
def test_dry_run_with_every_profile(tree: Path, profile: str) -> None:
    proc = snakemake(tree, "--profile", f"profiles/{profile}", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    jobs = proc.stdout + proc.stderr
    for rule in ("pull_image", "list_dataset", "prepare_chunk", "prepare_dataset", "train", "evaluate",
                 "plot_learning_curves", "plot_per_class", "plot_confusion_matrix", "plot_allocation", "record_page"):
        assert f"rule {rule}:" in jobs or f"localrule {rule}:" in jobs


def _edit(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def parse_time_error(tree: Path, profile: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The error of the workflow's parse-time checks (``check_workflow_config``, the call common.smk makes) on the
    tree's config with ``profiles/<profile>``, run where Snakemake runs them (the tree, the profile's relative
    ``hvdflow_profile``); "" when the config passes. :func:`test_the_workflow_makes_the_parse_time_checks` shows
    that a dry run reports the same errors."""
    monkeypatch.chdir(tree)
    for name, value in DRY_RUN_ENV.items():
        monkeypatch.setenv(name, value)
    config = {**yaml.safe_load((tree / "config" / "config.yaml").read_text()),
              "hvdflow_profile": f"profiles/{profile}/hvdflow.yaml"}
    try:
        check_workflow_config(config, tree / "workflow" / "schemas" / "config.schema.yaml",
                              tree / "profiles" / "local" / "hvdflow.yaml")
    except (WorkflowError, HvdflowError) as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["experiments"]["demo"].update(epoks=3), "'epoks' was unexpected"),
    (lambda c: c["experiments"]["demo"].update(ranks="two"), "'two' is not of type 'integer'"),
    (lambda c: c["experiments"]["demo"].update(ranks=0), "0 is less than the minimum of 1"),
    (lambda c: c["experiments"]["demo"].update(image="no-such-image"),
     "experiments.demo.image: 'no-such-image' is not in the catalogue containers/catalog.yaml"),
    (lambda c: c["experiments"]["demo"].update(dataset="mnist"),
     "experiments.demo.dataset: 'mnist' is not a key of datasets (digits)"),
    (lambda c: c["datasets"]["digits"].update(source="imagenet"),
     "'imagenet' is not one of ['sklearn-digits', 'bigearthnet-v1', 'bigearthnet-v2', 'image-folder']"),
    (lambda c: c["datasets"]["digits"].update(source="bigearthnet-v1"),
     "datasets.digits.path is required for source bigearthnet-v1"),
    (lambda c: c["datasets"]["digits"].update(source="bigearthnet-v2", path="config"),
     "datasets.digits.metadata is required for source bigearthnet-v2"),
    (lambda c: c["datasets"]["digits"].update(source="bigearthnet-v2", path="config", metadata="config/config.yaml",
                                              nomenclature=43),
     "datasets.digits.nomenclature: BigEarthNet v2 labels use the 19-class nomenclature only"),
    (lambda c: c["datasets"]["digits"].update(source="bigearthnet-v1", path="config/README.md"),
     "config/README.md is not a folder"),
    (lambda c: c["datasets"]["digits"].update(source="bigearthnet-v1", path="config", split_lists={"train": "config"}),
     "'validation' is a required property"),
    (lambda c: c["datasets"]["digits"].update(seasonal_snow_list="config/README.md"),
     "datasets.digits.seasonal_snow_list applies to bigearthnet-v1 only"),
    (lambda c: c["datasets"]["digits"].update(bands=["B10"]), "'B10' is not one of"),
    (lambda c: c["datasets"]["digits"].update(shard_size_mb=0), "0 is less than or equal to the minimum of 0"),
    (lambda c: c["experiments"]["demo"].update(model="vgg16"), "'vgg16' is not one of ['mlp', 'small-cnn', 'resnet50']"),
    (lambda c: c.update(colour="red"), "'colour' was unexpected"),
    (lambda c: c["experiments"]["demo"].update(resume="sometimes"), "'sometimes' is not one of ['auto', 'never']"),
    (lambda c: c["experiments"]["demo"].update(checkpoint_every=0), "0 is less than the minimum of 1"),
    (lambda c: c["experiments"]["demo"].update(usage_seconds=-1), "-1 is less than the minimum of 0"),
    (lambda c: c["experiments"]["demo"].update(strategy="neighbour", topology="torus"),
     "'torus' is not one of ['ring', 'exp2', 'onepeer-exp2']"),
    (lambda c: c["experiments"]["demo"].update(strategy="neighbour", topology="exp2", ranks=3),
     "experiments.demo: topology exp2 needs a power-of-two number of ranks, got ranks 3"),
    (lambda c: c["experiments"]["demo"].update(strategy="neighbour", ranks=1),
     "experiments.demo: strategy neighbour needs at least 2 ranks"),
    (lambda c: c["experiments"]["demo"].update(shard_order="sorted"), "'sorted' is not one of ['shuffled', 'by_label']"),
    (lambda c: c["experiments"]["demo"].update(model={"code": "config", "build": "unet"}), "'unet' does not match"),
    (lambda c: c["experiments"]["demo"].update(model={"code": "config", "build": "unet:build", "layers": 3}),
     "'layers' was unexpected"),
    (lambda c: c["experiments"]["demo"].update(model={"code": "models", "build": "unet:build"}),
     "experiments.demo.model.code: models is not a folder (looked for "),
    (lambda c: c["experiments"]["demo"].update(model={"code": "config", "build": "unet:build"}),
     "experiments.demo.model.build: unet:build: no module unet in "),
    (lambda c: c["benchmark"].update(repetitions=0), "benchmark.repetitions: 0 is less than the minimum of 1"),
    (lambda c: c["experiments"]["demo"].update(ranks=-2), "experiments.demo.ranks: -2 is less than the minimum of 1"),
    (lambda c: c["datasets"]["digits"].update(test_fraction=0.95),
     "datasets.digits: validation_fraction 0.1 and test_fraction 0.95 leave nothing to train on"),
    (lambda c: c["benchmark"].update(nodes=[1, 2]),
     "benchmark.ranks 2 on benchmark.nodes 2: nodes 2 needs a Slurm profile"),
    (lambda c: c["benchmark"].update(image="no-such-image"), "benchmark.image: 'no-such-image' is not an image"),
    (lambda c: c["experiments"]["demo"].update(framework="pytorch"),
     "experiments.demo.image: 'hvdflow-cpu' holds no pytorch (the catalogue containers/catalog.yaml says tensorflow "
     "2.15.1, torch none); framework pytorch trains in hvdflow-torch-cpu"),
    (lambda c: c["experiments"]["demo"].update(image="hvdflow-torch-cpu"),
     "experiments.demo.image: 'hvdflow-torch-cpu' holds no tensorflow"),
    (lambda c: c["experiments"]["demo"].update(distributed="ddp"),
     "distributed ddp is PyTorch's DistributedDataParallel: it needs framework pytorch"),
    (lambda c: c["experiments"]["demo"].update(framework="pytorch", image="hvdflow-torch-cpu", distributed="ddp",
                                               elastic={"min_ranks": 1}),
     "distributed ddp cannot run elastic: PyTorch's DistributedDataParallel has no elastic membership"),
    (lambda c: c["experiments"]["demo"].update(framework="pytorch", image="hvdflow-torch-cpu", distributed="ddp",
                                               strategy="neighbour"),
     "distributed ddp cannot run strategy neighbour: PyTorch's DistributedDataParallel has no elastic membership"),
    (lambda c: c["experiments"]["demo"].update(framework="keras"), "'keras' is not one of ['tensorflow', 'pytorch']"),
    (lambda c: c["benchmark"].update(frameworks=["pytorch-ddp"], torch_image="hvdflow-cpu"),
     "benchmark.torch_image: 'hvdflow-cpu' holds no pytorch (framework pytorch trains in hvdflow-torch-cpu, hvdflow-torch-gpu)"),
])
def test_bad_config_is_named_at_parse_time(tree: Path, edit, message: str,  # type: ignore[no-untyped-def]
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _edit(tree / "config" / "config.yaml", edit)
    error = parse_time_error(tree, "local", monkeypatch)
    assert error and message in error, error


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.update(scratch="/tmp"), "unknown key(s) scratch; valid keys:"),
    (lambda p: p["runtime"].update(kind="docker"), "runtime.kind: 'docker' is not one of udocker, native"),
    (lambda p: p.update(launcher="horovodrun"), "launcher: 'horovodrun' is not one of gloo, mpi"),
    (lambda p: p["runtime"].update(execmode="R2"), "runtime.execmode: 'R2' is not one of P1, P2, R1, auto"),
    (lambda p: (p["runtime"].update(execmode="R1"), p.update(launcher="mpi")),
     "runtime.execmode: execmode R1 cannot run launcher mpi: ranks in runc's"),
    (lambda p: p["runtime"].update(proot="usr-bin"), "runtime.proot: 'usr-bin' is not one of image, host"),
    (lambda p: p["runtime"].update(venv_dir="/tmp"), "runtime.venv_dir: a key of runtime kind native, not of udocker"),
    (lambda p: p["runtime"].update(colour="red"), "runtime: unknown key(s) colour; valid keys: execmode, kind, proot, "
                                                  "udocker_dir"),
    # a profile written before the runtime's keys moved into their section: the section to write instead
    (lambda p: p.update(runtime="udocker", execmode="P1"), "runtime, execmode: the runtime's keys are now one section; "
                                                           "write runtime: {kind: udocker, execmode: P1}"),
    (lambda p: p.update(registry="${HVDFLOW_NO_SUCH_VARIABLE}"), "environment variable $HVDFLOW_NO_SUCH_VARIABLE is not set"),
    (lambda p: p.pop("launcher"), "missing required key(s) launcher"),
    (lambda p: p.update(step_timeout_minutes=0), "step_timeout_minutes: must be"),
    (lambda p: p.update(cpu_bind="sockets"), "cpu_bind: 'sockets' is not one of cores, none"),
])
def test_bad_profile_is_named_at_parse_time(tree: Path, edit, message: str,  # type: ignore[no-untyped-def]
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _edit(tree / "profiles" / "local" / "hvdflow.yaml", edit)
    error = parse_time_error(tree, "local", monkeypatch)
    assert "profiles/local/hvdflow.yaml" in error and message in error, error


def test_a_benchmark_asking_more_gpus_than_the_clusters_nodes_have_is_named_before_any_job(tree: Path) -> None:
    # the test bed declares 4 GPUs per node: 10 ranks on 2 nodes need 5 per node
    _edit(tree / "config" / "config.yaml", lambda c: c["benchmark"].update(ranks=[2, 10], nodes=[2]))
    proc = snakemake(tree, "--profile", "profiles/testbed", "--dry-run", "benchmark")
    assert proc.returncode != 0
    assert ("benchmark.ranks 10 on benchmark.nodes 2: 10 ranks on 2 node(s) need 5 GPUs per node (one per rank), "
            "but profiles/testbed/hvdflow.yaml declares gpus_per_node: 4") in proc.stdout + proc.stderr


@pytest.mark.parametrize("profile", ["local", "testbed"])
def test_the_benchmark_target_plans_every_measurement_then_the_table_and_figures(tree: Path, profile: str) -> None:
    proc = snakemake(tree, "--profile", f"profiles/{profile}", "--dry-run", "benchmark")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = proc.stdout + proc.stderr
    config = yaml.safe_load((tree / "config" / "config.yaml").read_text())["benchmark"]
    # per repetition and runtime: the model at each rank count, and the allreduce sweep at 2 ranks
    expected = config["repetitions"] * len(config["runtimes"]) * (len(config["ranks"]) + 1)
    assert ["benchmark_measure", str(expected)] in [line.split() for line in jobs.splitlines()], jobs[-3000:]
    for plot in ("throughput", "efficiency", "runtime_ratio", "allreduce", "frameworks"):
        assert f"results/benchmark/plots/{plot}.png" in jobs
    # on one machine a repetition waits for the one before it, so its runtimes run side by side; under Slurm, not
    inputs = {line.split("output: ")[1]: previous for previous, line in zip(jobs.splitlines(), jobs.splitlines()[1:])
              if line.strip().startswith("output: results/benchmark/measurements/")}
    second = inputs["results/benchmark/measurements/mlp-r1-n1-native-1.json"]
    waits = [f"results/benchmark/measurements/{name}-0.json" for name in ("mlp-r1-n1-udocker", "mlp-r1-n1-native",
                                                                          "allreduce-r2-n1-native")]
    assert all((name in second) == (profile == "local") for name in waits), second
    assert "measurements/" not in inputs["results/benchmark/measurements/mlp-r1-n1-native-0.json"]


def test_without_a_profile_the_embedded_default_runs(tree: Path) -> None:
    proc = snakemake(tree, "--cores", "1", "--dry-run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert f"no profile given, so the embedded default runs: {tree / 'profiles/local/hvdflow.yaml'}" in output
    assert "rule train:" in output or "localrule train:" in output


def test_a_yaml_mistake_in_the_config_is_named_with_its_file_line_and_column(tree: Path) -> None:
    config = tree / "config" / "config.yaml"
    lines = config.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("experiments:"))
    lines[at] = "experiments: [demo,"   # an unclosed flow sequence, as a hand edit leaves it
    config.write_text("\n".join(lines) + "\n")
    proc = snakemake(tree, "--profile", "profiles/local", "--dry-run")
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert re.search(rf"config/config\.yaml, line \d+, column \d+: not valid YAML: .*that starts at line {at + 1}, "
                     rf"column 14\)", output), output[-3000:]
    assert "Config file is not valid JSON or YAML" not in output   # Snakemake's own message names neither


def test_an_installed_profile_is_found_by_its_bare_name(tree: Path, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path_factory.mktemp("home")
    env = {**environ_with_slurm_client(), "HOME": str(home), **DRY_RUN_ENV}
    env.pop("XDG_CONFIG_HOME", None)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), cwd=tree, env=env, capture_output=True, text=True, timeout=300)

    hvdflow = [sys.executable, "-m", "hvdflow", "profile", "install"]
    installed = run(*hvdflow, "testbed", "--as", "cluster")
    assert installed.returncode == 0, installed.stderr
    target = home / ".config" / "snakemake" / "cluster"
    assert f"as {target}" in installed.stdout and "run: snakemake --profile cluster" in installed.stdout
    assert f"hvdflow_profile={target / 'hvdflow.yaml'}" in (target / "config.yaml").read_text()
    assert "already installed" in run(*hvdflow, "testbed", "--as", "cluster").stdout
    dry = run(str(BIN / "snakemake"), "--profile", "cluster", "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "rule train:" in dry.stdout + dry.stderr
    # the installed hvdflow.yaml is the one the workflow reads: a bad key in it is named with its path
    _edit(target / "hvdflow.yaml", lambda p: p.update(scratch="/tmp"))
    bad = run(str(BIN / "snakemake"), "--profile", "cluster", "--dry-run")
    assert bad.returncode != 0 and f"{target / 'hvdflow.yaml'}" in bad.stdout + bad.stderr
    refused = run(*hvdflow, "testbed", "--as", "cluster")
    assert refused.returncode == 1 and f"{target} exists and differs" in refused.stderr and "--force" in refused.stderr
    assert run(*hvdflow, "testbed", "--as", "cluster", "--force").returncode == 0
    missing = run(*hvdflow, "nosuch")
    assert missing.returncode == 1 and "profiles/nosuch is not a cluster profile: it lacks config.yaml, hvdflow.yaml" \
        in missing.stderr and "testbed" in missing.stderr


SLURM_PROFILES = [p for p in PROFILES if "executor: slurm" in (REPO / "profiles" / p / "config.yaml").read_text()]
GOLDEN = REPO / "tests" / "golden"
# the experiment the golden command lines are made for: 8 ranks over 2 nodes
GOLDEN_EXPERIMENT = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": 8, "nodes": 2, "model": "mlp", "epochs": 1,
                     "batch_size": 32, "learning_rate": 0.01}


RECORDED_TOOLS = ("sbatch", "squeue", "sacct", "sinfo", "sacctmgr", "sshare", "scancel")


def _recorded_sbatch(tree: Path, profile: str, recorder: Path) -> list[str]:
    """The argv of the sbatch call Snakemake's Slurm plugin makes for the train job, recorded by a stand-in sbatch.

    The dataset and image records are made beforehand, so the train job is the only one to run; Snakemake is
    stopped (its whole process group) once the job was submitted.
    """
    bin_dir = recorder / "bin"
    bin_dir.mkdir(parents=True)
    for tool in RECORDED_TOOLS:
        (bin_dir / tool).symlink_to(REPO / "tests" / "slurm_recorder.py")
    made = ("resources/images/hvdflow-cpu.json", "resources/datasets/digits/manifest", "resources/datasets/digits/chunk-0",
            "resources/datasets/digits/index.json")
    now = time.time()
    for path in tree.rglob("*"):  # the checkout's files (the rules' inputs) older than the records made below, however
        os.utime(path, (now - 3600,) * 2, follow_symlinks=False)  # soon after a clone this runs
    for age, path in enumerate(reversed(made)):  # older along the chain, so only the train job is due
        target = tree / path
        if target.suffix == ".json":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("{}")
        else:
            target.mkdir(parents=True)
        os.utime(target, (now - 60 * (age + 1),) * 2)
    profile_config = yaml.safe_load((tree / "profiles" / profile / "config.yaml").read_text())
    accounts = [str(v) for v in [profile_config.get("default-resources", {}).get("slurm_account")] if v]
    env = {**environ_with_slurm_client(), "PATH": f"{bin_dir}:{BIN}:{os.environ['PATH']}",
           "HVDFLOW_RECORDER_DIR": str(recorder),
           "HVDFLOW_RECORDER_ACCOUNTS": ",".join(accounts), "HVDFLOW_REGISTRY": "http://127.0.0.1:5999",
           "HVDFLOW_ALLOW_ROOT": "1"}
    calls = recorder / "calls.jsonl"
    proc = subprocess.Popen([str(BIN / "snakemake"), "--profile", f"profiles/{profile}", "results/golden/run.json"],
                            cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (calls.exists() and '"tool": "sbatch"' in calls.read_text()):
            assert proc.poll() is None, f"snakemake ended without submitting:\n{proc.communicate()[0][-3000:]}"
            assert time.monotonic() < deadline, "no sbatch call within 120 s"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    submitted = [c["argv"] for c in map(json.loads, calls.read_text().splitlines()) if c["tool"] == "sbatch"]
    assert len(submitted) == 1, submitted
    return submitted[0]


def train_command_lines(tree: Path, profile: str, recorder: Path) -> str:
    """The sbatch line the Slurm plugin runs for the train job under ``profile``, and hvdflow's srun line.

    The sbatch line is normalised: the run's uuid and working directory are named, the wrapped Snakemake command
    is left out (it holds paths of this machine).
    """
    from hvdflow.config.profile import load_profile
    from hvdflow.launch.cpus import slurm_plan
    from hvdflow.slurm.srun import ranks_step

    _edit(tree / "config" / "config.yaml", lambda c: c.update(experiments={"golden": GOLDEN_EXPERIMENT}))
    argv = _recorded_sbatch(tree, profile, recorder)
    uuid = argv[argv.index("--job-name") + 1]
    sbatch = ["sbatch"] + [a.replace(uuid, "RUN_UUID").replace(str(tree), "WORKDIR") for a in argv
                           if not a.startswith("--wrap=") and a != "/dev/stdin"]
    os.environ.setdefault("HVDFLOW_REGISTRY", "http://127.0.0.1:5999")
    cluster = load_profile(tree / "profiles" / profile / "hvdflow.yaml").slurm
    assert cluster is not None
    # the job's --cpus-per-task (none: Slurm's 1), which the train step learns from Slurm
    [cpus] = [a.split("=")[1] for a in argv if a.startswith("--cpus-per-task=")] or ["1"]
    plan = slurm_plan(8, int(cpus), cluster.cpu_bind)
    srun = ranks_step(cluster, 8, 2, ["PYTHON", "-m", "hvdflow.slurm.rank_task", "TASK.json"], plan.threads)
    return f"{' '.join(sbatch)}\n{' '.join(srun)}\n"


@pytest.mark.parametrize("profile", SLURM_PROFILES)
def test_train_command_lines_of_each_slurm_profile_are_golden(tree: Path, profile: str, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    golden = GOLDEN / f"{profile}.train.txt"
    got = train_command_lines(tree, profile, tmp_path_factory.mktemp("recorder"))
    if os.environ.get("HVDFLOW_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert got == golden.read_text(), f"regenerate with HVDFLOW_UPDATE_GOLDEN=1 if the change is intended:\n{got}"


@pytest.mark.parametrize("edit, message", [
    (lambda p: p["slurm"].update(scratch="/tmp"), "slurm: unknown key(s) scratch; valid keys:"),
    (lambda p: p["slurm"].pop("gpus_per_node"), "slurm: missing required key(s) gpus_per_node"),
    (lambda p: p.pop("slurm"), "scheduler slurm needs a slurm section"),
    (lambda p: p["slurm"].update(gpus_per_node=-1), "gpus_per_node: must be 0 (no GPUs) or more"),
    (lambda p: p["slurm"].update(signal_grace_seconds=-5), "signal_grace_seconds: must be 0 (no warning) to 65535"),
    (lambda p: p.update(cpu_bind="core"), "cpu_bind: 'core' is not a value of srun's --cpu-bind"),
])
def test_bad_slurm_profile_is_named_at_parse_time(tree: Path, edit, message: str,  # type: ignore[no-untyped-def]
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _edit(tree / "profiles" / "testbed" / "hvdflow.yaml", edit)
    error = parse_time_error(tree, "testbed", monkeypatch)
    assert "profiles/testbed/hvdflow.yaml" in error and message in error, error


@pytest.mark.parametrize("profile, experiment, message", [
    ("testbed", {"ranks": 10, "nodes": 2},
     "experiments.demo: 10 ranks on 2 node(s) need 5 GPUs per node (one per rank), but profiles/testbed/hvdflow.yaml "
     "declares gpus_per_node: 4"),
    ("testbed", {"ranks": 2, "nodes": 3}, "experiments.demo: nodes (3) exceeds ranks (2)"),
    ("local", {"ranks": 4, "nodes": 2}, "experiments.demo: nodes 2 needs a Slurm profile"),
])
def test_impossible_layouts_are_named_at_parse_time(tree: Path, profile: str, experiment: dict[str, int],
                                                    message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _edit(tree / "config" / "config.yaml", lambda c: c["experiments"]["demo"].update(experiment))
    error = parse_time_error(tree, profile, monkeypatch)
    assert message in error, error


@pytest.mark.parametrize("profile, file, edit, message", [
    ("local", "config/config.yaml", lambda c: c["experiments"]["demo"].update(epoks=3), "'epoks' was unexpected"),
    ("local", "config/config.yaml", lambda c: c["experiments"]["demo"].update(dataset="mnist"),
     "experiments.demo.dataset: 'mnist' is not a key of datasets (digits)"),
    ("local", "profiles/local/hvdflow.yaml", lambda p: p["runtime"].update(kind="docker"),
     "runtime.kind: 'docker' is not one of udocker, native"),
    ("testbed", "profiles/testbed/hvdflow.yaml", lambda p: p["slurm"].pop("gpus_per_node"),
     "slurm: missing required key(s) gpus_per_node"),
])
def test_the_workflow_makes_the_parse_time_checks(tree: Path, profile: str, file: str, edit,  # type: ignore[no-untyped-def]
                                                  message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # one case of each kind (the schema, a check of the config, the profile, the Slurm profile) through a real dry
    # run: the same message as the call the other parse-time tests make, and no job planned
    _edit(tree / file, edit)
    proc = snakemake(tree, "--profile", f"profiles/{profile}", "--dry-run")
    assert proc.returncode != 0 and "Job stats:" not in proc.stdout + proc.stderr
    assert message in proc.stdout + proc.stderr and message in parse_time_error(tree, profile, monkeypatch)
