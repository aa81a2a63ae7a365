"""The config's checks that the JSON schema cannot do: keys that name other sections' entries, the profile's cluster
or the catalogue, and keys that only go together. ``workflow/rules/common.smk`` runs them at parse time, after the
schema and before any job (:func:`check_config`, then :func:`checked_benchmark`); each error names the key at fault."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from hvdflow.config.benchmark import BenchmarkSpec, benchmark_spec, runtime_kind
from hvdflow.config.datasets import check_dataset
from hvdflow.config.experiment import TrainSpec, max_ranks_of
from hvdflow.config.layout import check_layout
from hvdflow.config.profile import ClusterProfile
from hvdflow.errors import ConfigError, HvdflowError, LaunchError
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.modes import AUTO_MODE

PURPOSES = (("experiments", "train"), ("datasets", "prepare"))
"""What the image of each section's entries must be for (the catalogue's ``purposes``)."""


def check_config(config: Mapping[str, Any], profile: ClusterProfile, catalog: Mapping[str, ImageSpec]) -> None:
    """Every check of the datasets and experiments, in this order (the first error found is the one raised):
    :func:`check_experiment_datasets`, :func:`check_datasets`, :func:`check_experiments`, :func:`check_images`."""
    check_experiment_datasets(config)
    check_datasets(config)
    check_experiments(config, profile)
    check_images(config, catalog)


def check_experiment_datasets(config: Mapping[str, Any]) -> None:
    """ConfigError naming ``experiments.<name>.dataset`` where it is not a key of ``datasets``."""
    for name, experiment in config["experiments"].items():
        if experiment["dataset"] not in config["datasets"]:
            raise ConfigError(
                f"experiments.{name}.dataset: {experiment['dataset']!r} is not a key of datasets "
                f"({', '.join(sorted(config['datasets']))})"
            )


def check_datasets(config: Mapping[str, Any]) -> None:
    """ConfigError naming ``datasets.<name>.<key>`` where an entry cannot work (:func:`check_dataset`)."""
    for name, entry in config["datasets"].items():
        check_dataset(name, entry)


def check_launcher(spec: TrainSpec, profile: ClusterProfile) -> None:
    """LaunchError where the profile's launcher cannot run the experiment: an elastic run needs Gloo."""
    if spec.elastic is not None and profile.launcher != "gloo":
        raise LaunchError(f"elastic runs need the Gloo launcher (Horovod's elastic mode has no MPI controller); the "
                          f"profile {profile.path} has launcher {profile.launcher}")


def check_experiments(config: Mapping[str, Any], profile: ClusterProfile) -> None:
    """ConfigError naming ``experiments.<name>``, experiment by experiment: first a layout the profile's cluster cannot
    hold (:func:`check_layout` of its slots, ``max_ranks`` for an elastic run), then the keys that depend on each other
    (strategy, topology, ranks, the elastic bounds: :class:`TrainSpec`), the launcher (:func:`check_launcher`) and a
    user's own model's folder and module (:class:`~hvdflow.config.user_code.UserModel`)."""
    for name, entry in config["experiments"].items():
        where = f"experiments.{name}"
        # the slots read before the entry is built, so that an impossible layout is named before the keys' errors
        check_layout(where, max_ranks_of(entry["ranks"], entry.get("elastic")), entry["nodes"], profile.slurm,
                     profile.path)
        try:
            spec = TrainSpec.from_config(entry)
            check_launcher(spec, profile)
        except HvdflowError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        spec.user_model(f"{where}.model")  # a user's own model: its folder and build module are there


def image_framework_version(image: ImageSpec, framework: str) -> str:
    """The version of ``framework`` (``tensorflow`` or ``pytorch``) the catalogue says ``image`` holds, or ``none``."""
    return image.tensorflow if framework == "tensorflow" else image.torch


def check_images(config: Mapping[str, Any], catalog: Mapping[str, ImageSpec]) -> None:
    """ConfigError naming ``<section>.<name>.image`` where it is not in the catalogue (``config["catalog"]``), or is
    not for what the section does: ``train`` for experiments, ``prepare`` for datasets; an experiment's image must
    hold its framework."""
    for section, purpose in PURPOSES:
        for name, entry in config[section].items():
            if entry["image"] not in catalog:
                raise ConfigError(
                    f"{section}.{name}.image: {entry['image']!r} is not in the catalogue {config['catalog']} "
                    f"({', '.join(sorted(catalog))})"
                )
            if purpose not in catalog[entry["image"]].purposes:
                raise ConfigError(
                    f"{section}.{name}.image: {entry['image']!r} is not for {purpose} "
                    f"(its purposes in {config['catalog']}: {', '.join(catalog[entry['image']].purposes)})"
                )
    for name, entry in config["experiments"].items():
        framework = entry.get("framework", "tensorflow")
        image = catalog[entry["image"]]
        if image_framework_version(image, framework) == "none":
            holding = sorted(n for n, i in catalog.items() if "train" in i.purposes
                             and image_framework_version(i, framework) != "none")
            raise ConfigError(
                f"experiments.{name}.image: {entry['image']!r} holds no {framework} (the catalogue {config['catalog']} "
                f"says tensorflow {image.tensorflow}, torch {image.torch}); framework {framework} trains in "
                f"{', '.join(holding) or 'none of its images'}"
            )


def checked_benchmark(config: Mapping[str, Any], profile: ClusterProfile,
                      catalog: Mapping[str, ImageSpec]) -> Optional[BenchmarkSpec]:
    """The config's ``benchmark:`` section checked like the experiments (its keys, every layout on the profile's
    cluster, an image of the catalogue that trains); None where the config has none. ConfigError naming the key."""
    if "benchmark" not in config:
        return None
    spec = benchmark_spec(config["benchmark"])
    made = profile.runtime.execmode or (catalog[spec.image].execmode if spec.image in catalog else None)
    for runtime in spec.runtimes:
        mode = runtime_kind(runtime)[1]
        if mode is not None and made not in (AUTO_MODE, mode):
            raise ConfigError(f"benchmark.runtimes: {runtime} runs udocker's {mode} container, which execmode {made} "
                              f"does not make (profile {profile.path}): set runtime.execmode: auto or {mode} there")
    for ranks, nodes in spec.layouts():
        check_layout(f"benchmark.ranks {ranks} on benchmark.nodes {nodes}", ranks, nodes, profile.slurm, profile.path)
    for key, image, framework, used in (("image", spec.image, "tensorflow", "tensorflow" in spec.frameworks),
                                        ("torch_image", spec.torch_image, "pytorch", spec.frameworks != ("tensorflow",))):
        if not used:
            continue
        holding = sorted(n for n, i in catalog.items() if "train" in i.purposes
                         and image_framework_version(i, framework) != "none")
        if image not in catalog or "train" not in catalog[image].purposes:
            raise ConfigError(f"benchmark.{key}: {image!r} is not an image of the catalogue {config['catalog']} that "
                              f"trains ({', '.join(sorted(n for n, i in catalog.items() if 'train' in i.purposes))})")
        if image not in holding:
            raise ConfigError(f"benchmark.{key}: {image!r} holds no {framework} (framework {framework} trains in "
                              f"{', '.join(holding) or 'none of the catalogue'})")
    return spec
