# the Snakefile has put this workflow's src/ first on sys.path (one source of code)
from hvdflow.pipeline import steps  # noqa: E402
from hvdflow.config.benchmark import (
    ALLREDUCE,
    BENCHMARK_RUNTIMES,
    MODELS,
    framework_of,
)  # noqa: E402
from hvdflow.config.parse_time import check_workflow_config  # noqa: E402
from hvdflow.config.datasets import input_paths, source_name, task_of  # noqa: E402
from hvdflow.config.experiment import TrainSpec  # noqa: E402
from hvdflow.launch import supervise  # noqa: E402
from snakemake_interface_executor_plugins.settings import ExecMode  # noqa: E402
from hvdflow.slurm.layout import gres, job_task_resources  # noqa: E402

# the schema, then the checks it cannot do (hvdflow.config.parse_time): one call, which the tests make too
try:
    _CHECKED = check_workflow_config(
        config,
        Path(workflow.basedir) / "schemas" / "config.schema.yaml",
        Path(workflow.basedir).parent / "profiles" / "local" / "hvdflow.yaml",
    )
except HvdflowError as exc:
    raise WorkflowError(str(exc)) from None
PROFILE, CATALOG, BENCHMARK = _CHECKED.profile, _CHECKED.catalog, _CHECKED.benchmark

# Ctrl-C and hang-ups reach the ranks that the rule bodies start (Snakemake runs those bodies in threads), so they
# checkpoint; a job Snakemake spawned stops its ranks when Snakemake has given it up
supervise.watch_stop_signals(spawned_job=workflow.exec_mode == ExecMode.SUBPROCESS)

BENCHMARK_KINDS = list(MODELS) + [ALLREDUCE] if BENCHMARK is None else BENCHMARK.kinds()
BENCHMARK_PLOTS = [
    "throughput",
    "efficiency",
    "runtime_ratio",
    "allreduce",
    "frameworks",
]


wildcard_constraints:
    experiment="|".join(config["experiments"]),
    dataset="|".join(config["datasets"]),
    image="|".join(CATALOG),
    chunk=r"\d+",


def experiment(wildcards):
    """The config entry of the experiment a job belongs to."""
    return config["experiments"][wildcards.experiment]


def train_tasks(wildcards):
    """The task resources of a training job (see hvdflow.slurm.layout.job_task_resources): room for its slots
    (max_ranks of an elastic run)."""
    spec = TrainSpec.from_config(experiment(wildcards))
    return job_task_resources(
        spec.slots, spec.nodes, PROFILE.slurm, elastic=spec.elastic is not None
    )


def train_gres(wildcards):
    """The GPUs a training job asks for on each node (``gpu:N``), or none on a cluster without GPUs."""
    spec = TrainSpec.from_config(experiment(wildcards))
    return gres(spec.slots, spec.nodes, PROFILE.slurm)


def image_needs(image):
    """What this workflow's jobs need of an image: training (an experiment runs in it) and the dataset sources it
    prepares."""
    sources = sorted(
        {
            source_name(entry)
            for entry in config["datasets"].values()
            if entry["image"] == image
        }
    )
    frameworks = sorted(
        {
            entry.get("framework", "tensorflow")
            for entry in config["experiments"].values()
            if entry["image"] == image
        }
        | (
            set()
            if BENCHMARK is None
            else {
                "tensorflow" if framework_of(kind)[0] == "tensorflow" else "pytorch"
                for kind in BENCHMARK.kinds()
                if BENCHMARK.image_of(kind) == image
            }
        )
    )
    return {
        "purposes": (["train"] if frameworks else [])
        + (["prepare"] if sources else []),
        "sources": sources,
        "frameworks": frameworks,
    }


def get_image_record(image):
    """The image record a job needs."""
    return f"resources/images/{image}.json"


def get_dataset_image_record(wildcards):
    """The image record of the image a dataset is prepared in."""
    return get_image_record(config["datasets"][wildcards.dataset]["image"])


def get_dataset_sources(wildcards):
    """The dataset's own files and folders (its data folder, metadata table, lists): listing again when they change."""
    return input_paths(config["datasets"][wildcards.dataset])


def get_dataset_chunks(wildcards):
    """The prepared chunks of a dataset, gathered into its index."""
    count = config["datasets"][wildcards.dataset]["chunks"]
    return [f"resources/datasets/{wildcards.dataset}/chunk-{i}" for i in range(count)]


def get_train_inputs(wildcards):
    """What a training job reads: its image record and its prepared dataset's index (and a user's model's check)."""
    entry = experiment(wildcards)
    inputs = {
        "image": get_image_record(entry["image"]),
        "index": f"resources/datasets/{entry['dataset']}/index.json",
    }
    if isinstance(
        entry["model"], dict
    ):  # a user's own model: checked before the job (rule check_model)
        inputs["model_check"] = f"results/{wildcards.experiment}/model-check.json"
    return inputs


def get_final_outputs():
    """Every experiment's evaluation, figures (learning curves, per class, its use of the allocation) and record page;
    a confusion matrix for single-label data only, the membership figure for elastic runs only.
    """
    outputs = []
    for name, entry in config["experiments"].items():
        outputs += [
            f"results/{name}/evaluation.json",
            f"results/{name}/plots/learning_curves.png",
            f"results/{name}/plots/per_class.png",
            f"results/{name}/plots/allocation.png",
            f"results/{name}/run-record.html",
        ]
        if task_of(config["datasets"][entry["dataset"]]) == "single-label":
            outputs.append(f"results/{name}/plots/confusion_matrix.png")
        if "elastic" in entry:
            outputs.append(f"results/{name}/plots/membership.png")
    return outputs


def benchmark_spec_or_error():
    """The config's benchmark, or an error saying that the config has none."""
    if BENCHMARK is None:
        raise WorkflowError(
            "the benchmark target needs a `benchmark:` section in the config (config/README.md)"
        )
    return BENCHMARK


def benchmark_tasks(wildcards):
    """The task resources of one benchmark measurement's job (as a training job's)."""
    return job_task_resources(int(wildcards.ranks), int(wildcards.nodes), PROFILE.slurm)


def get_benchmark_previous_repetition(wildcards):
    """On one machine, the measurements of the repetition before this one (hvdflow.config.benchmark's
    BenchmarkSpec.repetition): a repetition starts after the last has ended. Marked ancient: an order, not data, so
    their times never make a measurement rerun. Under Slurm, none: the measurements run as the nodes allow.
    """
    if PROFILE.slurm:
        return []
    return ancient(
        [
            f"results/benchmark/measurements/{m.name}.json"
            for m in benchmark_spec_or_error().repetition(int(wildcards.rep) - 1)
        ]
    )


def get_benchmark_measurements():
    """Every measurement file of the config's benchmark."""
    return [
        f"results/benchmark/measurements/{m.name}.json"
        for m in benchmark_spec_or_error().measurements()
    ]
