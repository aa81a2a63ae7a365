"""What a rerun recreates from the record: the record itself (read and checked), the config of its one experiment,
the profile's settings, and the lock that pins its image to the recorded digest."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from hvdflow.config.profile import profile_settings
from hvdflow.errors import RerunRefused
from hvdflow.files.atomic import write_text_atomic
from hvdflow.images.lockfile import write_lock_entry

RECORD_VERSIONS = (1, 2, 3)
"""The run-record versions this hvdflow can rerun."""
_NEEDED = ("experiment", "config", "profile", "image", "code", "inputs_sha256", "weights_sha256", "history",
           "versions", "machines", "numerics", "seeds")
SETTINGS_DIR = "rerun"
"""The folder of the worktree that holds the recreated config and profile settings (untracked)."""


def read_record(path: Path) -> dict[str, Any]:
    """The run record at ``path``; RerunRefused naming the file if it is not one this hvdflow can rerun."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RerunRefused(f"{path}: not a readable run record: {exc}") from None
    if not isinstance(record, dict) or record.get("record_version") not in RECORD_VERSIONS:
        version = record.get("record_version") if isinstance(record, dict) else None
        raise RerunRefused(f"{path}: record_version {version!r}; this hvdflow reruns versions "
                           f"{', '.join(map(str, RECORD_VERSIONS))} (records before version 1 hold the profile as "
                           "text and cannot be rerun)")
    missing = [key for key in _NEEDED if key not in record]
    if missing:
        raise RerunRefused(f"{path}: the record has no {', '.join(missing)}")
    return record


def workdir_of(record_path: Path) -> Path:
    """The working directory the run ran in: ``results/<experiment>/run.json`` sits two folders below it."""
    return record_path.resolve().parent.parent.parent


@dataclass(frozen=True)
class Settings:
    """The recreated files, relative to the worktree (Snakemake runs there)."""

    experiment_config: Path
    """The recorded experiment and its dataset, as Snakemake's ``--configfile``."""
    snakemake_profile: Path
    """The recorded Snakemake profile, its ``hvdflow_profile`` pointing at the recreated ``hvdflow.yaml``."""
    lock: Path


def _snakemake_profile(record: dict[str, Any], root: Path) -> dict[str, Any]:
    """The recorded profile's Snakemake ``config.yaml``, as the recorded revision (or the site) has it."""
    recorded = Path(str(record["profile"]["path"])).parent
    path = (recorded if recorded.is_absolute() else root / recorded) / "config.yaml"
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RerunRefused(f"the recorded run's Snakemake profile {path} cannot be read (the record's profile.path "
                           f"is {record['profile']['path']}): {exc}") from None
    if not isinstance(document, dict):
        raise RerunRefused(f"the recorded run's Snakemake profile {path} is not a mapping")
    return document


def recreate(record: dict[str, Any], root: Path, registry: Optional[str]) -> Settings:
    """Write the record's config, profile (with ``registry`` instead of the recorded registry, if given) and image
    lock into the worktree ``root``, under ``SETTINGS_DIR``."""
    config, name = record["config"], record["experiment"]
    experiment = config["experiment"]
    settings_dir = root / SETTINGS_DIR
    settings_dir.mkdir(parents=True, exist_ok=True)
    header = "# recreated by `hvdflow rerun` from the run record\n"
    experiment_config = Path(SETTINGS_DIR) / "experiment.yaml"
    document = {"catalog": config["catalog"], "lock": config["lock"],
                "datasets": {experiment["dataset"]: config["dataset"]}, "experiments": {name: experiment}}
    write_text_atomic(root / experiment_config, header + yaml.safe_dump(document, sort_keys=True))
    profile = dict(record["profile"])
    if registry:
        profile["registry"] = registry.rstrip("/")
    write_text_atomic(settings_dir / "hvdflow.yaml", header + yaml.safe_dump(profile_settings(profile), sort_keys=True))
    snakemake = _snakemake_profile(record, root)
    kept = [item for item in snakemake.get("config") or [] if not str(item).startswith("hvdflow_profile=")]
    snakemake["config"] = [*kept, f"hvdflow_profile={SETTINGS_DIR}/hvdflow.yaml"]
    write_text_atomic(settings_dir / "config.yaml", header + yaml.safe_dump(snakemake, sort_keys=False))
    image = record["image"]
    lock = Path(config["lock"])
    (root / lock).parent.mkdir(parents=True, exist_ok=True)
    write_lock_entry(root / lock, image["name"], image["reference"], image["digest"])
    return Settings(experiment_config=experiment_config, snakemake_profile=Path(SETTINGS_DIR), lock=lock)
