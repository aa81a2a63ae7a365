"""Everything the workflow checks at parse time, in order, as one call: ``workflow/rules/common.smk`` makes it before
any rule is defined, and the tests make the same call with each bad config or profile (milliseconds, where a
``snakemake --dry-run`` of each costs seconds; a few dry runs check that the workflow makes it)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, MutableMapping, Optional

from hvdflow.config.benchmark import BenchmarkSpec
from hvdflow.config.checks import check_config, checked_benchmark
from hvdflow.config.keyorder import key_sorted
from hvdflow.config.profile import ClusterProfile, load_profile
from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import parse_yaml
from hvdflow.images.catalog import ImageSpec, load_catalog

SORTED_SECTIONS = ("datasets", "experiments")
"""The sections whose entries' keys are sorted: the rules' params compare in order, and the same settings listed in
another order must not re-run a rule."""


@dataclass(frozen=True)
class CheckedConfig:
    """What the rules need besides the config itself, loaded while checking it."""

    profile: ClusterProfile
    catalog: Mapping[str, ImageSpec]
    benchmark: Optional[BenchmarkSpec]


def schema_problem(config: Mapping[str, Any], schema: Path) -> Optional[str]:
    """The config's most telling departure from the JSON ``schema``, in the user's terms: the dotted key and what is
    wrong with its value (``experiments.demo.ranks: -2 is less than the minimum of 1``), not the schema's internals;
    None where the config is valid."""
    import jsonschema  # Snakemake's own dependency, as is its validate

    document = parse_yaml(schema)
    validator = jsonschema.validators.validator_for(document)(document)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path) or "the config"
    return f"{where}: {error.message}"


def check_workflow_config(config: MutableMapping[str, Any], schema: Path, default_profile: Path) -> CheckedConfig:
    """Check ``config`` as the workflow does at parse time, completing it in place: the JSON ``schema`` (Snakemake's
    ``validate``, which fills in the schema's defaults; its WorkflowError names the key), the sections' keys sorted,
    the profile (``default_profile`` when the config names none: the embedded default, said on stderr), then the
    checks the schema cannot do (:func:`hvdflow.config.checks.check_config` and the benchmark). Errors: ConfigError
    (naming the key, file or value), the schema's in the user's terms (:func:`schema_problem`)."""
    from snakemake.utils import validate  # the host package uses Snakemake only where the workflow does

    problem = schema_problem(config, schema)
    if problem:
        raise ConfigError(problem)
    validate(config, str(schema), set_default=True)  # valid: Snakemake's validate fills in the schema's defaults
    for section in SORTED_SECTIONS:
        config[section] = key_sorted(config[section])
    if "hvdflow_profile" not in config:
        config["hvdflow_profile"] = str(default_profile)
        print(f"hvdflow: no profile given, so the embedded default runs: {default_profile} "
              "(snakemake --profile NAME picks a cluster's; see profiles/README.md)", file=sys.stderr)
    profile = load_profile(Path(config["hvdflow_profile"]))
    catalog = load_catalog(Path(config["catalog"]))
    check_config(config, profile, catalog)
    return CheckedConfig(profile, catalog, checked_benchmark(config, profile, catalog))
