"""The config's checks that the schema cannot do (hvdflow.config.checks and hvdflow.config.layout), called as common.smk
calls them at parse time: each passes a sound config and names the key at fault, word for word."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest

from hvdflow.config.checks import (
    check_config,
    check_datasets,
    check_experiment_datasets,
    check_experiments,
    check_images,
    check_launcher,
    checked_benchmark,
)
from hvdflow.config.experiment import TrainSpec, max_ranks_of
from hvdflow.config.layout import check_layout
from hvdflow.config.profile import ClusterProfile, load_profile
from hvdflow.errors import ConfigError, LaunchError
from hvdflow.images.catalog import ImageSpec

TRAIN = {"ranks": 2, "nodes": 1, "model": "mlp", "hidden_units": 8, "epochs": 2, "batch_size": 32,
         "learning_rate": 0.01, "momentum": 0.9, "warmup_epochs": 1, "seed": 1}
BENCHMARK = {"image": "cpu", "models": ["mlp"], "ranks": [1, 2], "nodes": [1]}


def config(**sections: Any) -> dict[str, Any]:
    """A sound config (after the schema) of one dataset and one experiment, with ``sections`` replaced or added."""
    return {"catalog": "containers/catalog.yaml",
            "datasets": {"digits": {"source": "sklearn-digits", "image": "cpu"}},
            "experiments": {"demo": {**TRAIN, "dataset": "digits", "image": "cpu"}}, **sections}


def experiment(**keys: Any) -> dict[str, Any]:
    """The experiments section of one experiment, ``demo``, with ``keys`` changed."""
    return {"demo": {**TRAIN, "dataset": "digits", "image": "cpu", **keys}}


def profile(tmp_path: Path, launcher: str = "gloo", gpus_per_node: Optional[int] = None) -> ClusterProfile:
    """A profile of this machine, or of a Slurm cluster with ``gpus_per_node`` GPUs on each node."""
    lines = ["registry: http://127.0.0.1:5000", "runtime: {kind: udocker}", f"launcher: {launcher}"]
    if gpus_per_node is not None:
        lines += ["scheduler: slurm", f"slurm: {{scratch_dir: /tmp, gpus_per_node: {gpus_per_node}}}"]
    path = tmp_path / "hvdflow.yaml"
    path.write_text("\n".join(lines) + "\n")
    return load_profile(path)


def image(name: str, *purposes: str) -> ImageSpec:
    """A catalogue entry for ``purposes``."""
    return ImageSpec(name=name, description="", repository=f"hvdflow/{name}", tag="1", device="cpu", python="3.11",
                     tensorflow="2.15", horovod="0.28", mpi="openmpi", execmode="P1", recipe=None, tested=True,
                     purposes=purposes)


CATALOG = {"cpu": image("cpu", "prepare", "train"), "trainer": image("trainer", "train"),
           "preparer": image("preparer", "prepare")}


def raised(error: type[Exception], call: Any, *args: Any) -> str:
    """The message of the ``error`` that ``call(*args)`` raises."""
    with pytest.raises(error) as caught:
        call(*args)
    return str(caught.value)


def test_a_sound_config_passes_every_check(tmp_path: Path) -> None:
    check_config(config(), profile(tmp_path), CATALOG)
    check_config(config(experiments=experiment(ranks=4, nodes=2, batch_size=30, elastic={"min_ranks": 2, "max_ranks": 6})),
                 profile(tmp_path, gpus_per_node=4), CATALOG)


def test_an_experiments_dataset_must_be_a_key_of_datasets() -> None:
    check_experiment_datasets(config())
    bad = config(experiments=experiment(dataset="mnist"),
                 datasets={"digits": {"source": "sklearn-digits", "image": "cpu"}, "aa": {}})
    assert raised(ConfigError, check_experiment_datasets, bad) == (
        "experiments.demo.dataset: 'mnist' is not a key of datasets (aa, digits)")


def test_each_dataset_entry_is_checked() -> None:
    check_datasets(config())
    bad = config(datasets={"digits": {"source": "bigearthnet-v1", "image": "cpu"}})
    assert raised(ConfigError, check_datasets, bad) == "datasets.digits.path is required for source bigearthnet-v1"


@pytest.mark.parametrize(("ranks", "nodes", "gpus_per_node"), [(4, 1, None), (8, 2, 4), (10, 2, 0), (3, 2, 2)])
def test_a_layout_the_cluster_holds_passes(tmp_path: Path, ranks: int, nodes: int, gpus_per_node: Optional[int]) -> None:
    cluster = profile(tmp_path, gpus_per_node=gpus_per_node)
    check_layout("here", ranks, nodes, cluster.slurm, cluster.path)


@pytest.mark.parametrize(("ranks", "nodes", "gpus_per_node", "message"), [
    (2, 3, 4, "here: nodes (3) exceeds ranks (2)"),
    (4, 2, None, "here: nodes 2 needs a Slurm profile; {path} runs on one machine"),
    (10, 2, 4, "here: 10 ranks on 2 node(s) need 5 GPUs per node (one per rank), but {path} declares gpus_per_node: 4"),
])
def test_a_layout_the_cluster_cannot_hold_is_named(tmp_path: Path, ranks: int, nodes: int,
                                                     gpus_per_node: Optional[int], message: str) -> None:
    cluster = profile(tmp_path, gpus_per_node=gpus_per_node)
    assert raised(ConfigError, check_layout, "here", ranks, nodes, cluster.slurm, cluster.path) == message.format(
        path=cluster.path)


@pytest.mark.parametrize("elastic", [None, {"min_ranks": 1}, {"min_ranks": 1, "max_ranks": 4}])
def test_the_slots_read_alone_are_the_specs(elastic: Optional[dict[str, int]]) -> None:
    entry = {**TRAIN, "batch_size": 12, **({"elastic": elastic} if elastic else {})}
    assert max_ranks_of(entry["ranks"], entry.get("elastic")) == TrainSpec.from_config(entry).slots


def test_an_elastic_run_needs_the_gloo_launcher(tmp_path: Path) -> None:
    elastic = TrainSpec.from_config({**TRAIN, "elastic": {"min_ranks": 1}})
    check_launcher(elastic, profile(tmp_path))
    mpi = profile(tmp_path, launcher="mpi")
    check_launcher(TrainSpec.from_config(TRAIN), mpi)
    assert raised(LaunchError, check_launcher, elastic, mpi) == (
        f"elastic runs need the Gloo launcher (Horovod's elastic mode has no MPI controller); the profile {mpi.path} "
        "has launcher mpi")


@pytest.mark.parametrize(("keys", "launcher", "gpus_per_node", "message"), [
    # the layout of an elastic run's slots (max_ranks), not of its ranks
    ({"ranks": 2, "nodes": 2, "batch_size": 30, "elastic": {"min_ranks": 2, "max_ranks": 6}}, "gloo", 2,
     "experiments.demo: 6 ranks on 2 node(s) need 3 GPUs per node (one per rank), but {path} declares "
     "gpus_per_node: 2"),
    # the layout is named before the keys that do not go together (TrainSpec would name nodes too)
    ({"ranks": 2, "nodes": 3}, "gloo", 4, "experiments.demo: nodes (3) exceeds ranks (2)"),
    ({"strategy": "neighbour", "topology": "exp2", "ranks": 3}, "gloo", None,
     "experiments.demo: topology exp2 needs a power-of-two number of ranks, got ranks 3 (ring takes any number)"),
    ({"elastic": {"min_ranks": 3}}, "gloo", None,
     "experiments.demo: elastic needs 1 <= min_ranks <= ranks <= max_ranks, got min_ranks 3, ranks 2, max_ranks 2"),
    ({"elastic": {"min_ranks": 1}}, "mpi", None,
     "experiments.demo: elastic runs need the Gloo launcher (Horovod's elastic mode has no MPI controller); the "
     "profile {path} has launcher mpi"),
])
def test_an_experiment_is_named_for_its_layout_then_its_keys_then_its_launcher(
        tmp_path: Path, keys: dict[str, Any], launcher: str, gpus_per_node: Optional[int], message: str) -> None:
    cluster = profile(tmp_path, launcher=launcher, gpus_per_node=gpus_per_node)
    check_experiments(config(), cluster)
    assert raised(ConfigError, check_experiments, config(experiments=experiment(**keys)), cluster) == message.format(
        path=cluster.path)


@pytest.mark.parametrize(("section", "name", "message"), [
    ("experiments", "no-such-image",
     "experiments.demo.image: 'no-such-image' is not in the catalogue containers/catalog.yaml (cpu, preparer, trainer)"),
    ("datasets", "no-such-image",
     "datasets.digits.image: 'no-such-image' is not in the catalogue containers/catalog.yaml (cpu, preparer, trainer)"),
    ("experiments", "preparer",
     "experiments.demo.image: 'preparer' is not for train (its purposes in containers/catalog.yaml: prepare)"),
    ("datasets", "trainer",
     "datasets.digits.image: 'trainer' is not for prepare (its purposes in containers/catalog.yaml: train)"),
])
def test_an_image_must_be_in_the_catalogue_and_for_what_its_section_does(section: str, name: str, message: str) -> None:
    check_images(config(), CATALOG)
    check_images(config(experiments=experiment(image="trainer"),
                        datasets={"digits": {"source": "sklearn-digits", "image": "preparer"}}), CATALOG)
    bad = config()
    entry = next(iter(bad[section].values()))
    entry["image"] = name
    assert raised(ConfigError, check_images, bad, CATALOG) == message


def test_the_benchmark_is_none_without_its_section_and_its_spec_with_it(tmp_path: Path) -> None:
    assert checked_benchmark(config(), profile(tmp_path), CATALOG) is None
    spec = checked_benchmark(config(benchmark=BENCHMARK), profile(tmp_path), CATALOG)
    assert spec is not None and (spec.image, spec.ranks, spec.nodes) == ("cpu", (1, 2), (1,))


@pytest.mark.parametrize(("keys", "gpus_per_node", "message"), [
    ({"ranks": [1]}, None,
     "benchmark.allreduce: the allreduce sweep needs a rank count of at least 2 in benchmark.ranks (or allreduce: false)"),
    ({"nodes": [1, 2]}, None, "benchmark.ranks 2 on benchmark.nodes 2: nodes 2 needs a Slurm profile; {path} runs on "
                              "one machine"),
    ({"ranks": [2, 10], "nodes": [2]}, 4,
     "benchmark.ranks 10 on benchmark.nodes 2: 10 ranks on 2 node(s) need 5 GPUs per node (one per rank), but {path} "
     "declares gpus_per_node: 4"),
    ({"image": "no-such-image"}, None,
     "benchmark.image: 'no-such-image' is not an image of the catalogue containers/catalog.yaml that trains "
     "(cpu, trainer)"),
    ({"image": "preparer"}, None,
     "benchmark.image: 'preparer' is not an image of the catalogue containers/catalog.yaml that trains (cpu, trainer)"),
    ({"runtimes": ["udocker-P1", "udocker-R1", "native"]}, None,
     "benchmark.runtimes: udocker-R1 runs udocker's R1 container, which execmode P1 does not make (profile {path}): "
     "set runtime.execmode: auto or R1 there"),
])
def test_a_bad_benchmark_is_named(tmp_path: Path, keys: dict[str, Any], gpus_per_node: Optional[int],
                                  message: str) -> None:
    cluster = profile(tmp_path, gpus_per_node=gpus_per_node)
    assert raised(ConfigError, checked_benchmark, config(benchmark={**BENCHMARK, **keys}), cluster, CATALOG) == (
        message.format(path=cluster.path))


def test_the_config_is_checked_datasets_then_experiments_then_images(tmp_path: Path) -> None:
    # every entry wrong: put right one by one, the errors come in check_config's order
    bad = config(experiments=experiment(dataset="mnist", nodes=3, image="preparer"),
                 datasets={"digits": {"source": "bigearthnet-v1", "image": "trainer"}})
    fixes = [lambda c: c["experiments"]["demo"].update(dataset="digits"),
             lambda c: c["datasets"]["digits"].update(source="sklearn-digits"),
             lambda c: c["experiments"]["demo"].update(nodes=1),
             lambda c: c["experiments"]["demo"].update(image="cpu"),
             lambda c: c["datasets"]["digits"].update(image="cpu")]
    messages = []
    for fix in fixes:
        messages.append(raised(ConfigError, check_config, bad, profile(tmp_path), CATALOG))
        fix(bad)
    assert messages == [
        "experiments.demo.dataset: 'mnist' is not a key of datasets (digits)",
        "datasets.digits.path is required for source bigearthnet-v1",
        "experiments.demo: nodes (3) exceeds ranks (2)",
        "experiments.demo.image: 'preparer' is not for train (its purposes in containers/catalog.yaml: prepare)",
        "datasets.digits.image: 'trainer' is not for prepare (its purposes in containers/catalog.yaml: train)",
    ]
    check_config(bad, profile(tmp_path), CATALOG)
