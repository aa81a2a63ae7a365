"""The profile ``hvdflow doctor`` checks: found as ``snakemake --profile NAME`` finds it, with what its Snakemake
``config.yaml`` asks of Slurm for the train rule (partition, account, time limit)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.config.profile import ClusterProfile, load_profile
from hvdflow.config.profile_install import snakemake_user_profiles
from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import load_mapping

HVDFLOW_PROFILE_KEY = "hvdflow_profile"


@dataclass(frozen=True)
class DoctorProfile:
    """A profile as the doctor checks it: ``folder`` the Snakemake profile (None: the embedded default), ``cluster``
    hvdflow's settings, and the train rule's Slurm resources the profile sets (None where it sets none)."""

    folder: Optional[Path]
    cluster: ClusterProfile
    partition: Optional[str] = None
    account: Optional[str] = None
    runtime_minutes: Optional[int] = None
    """The train rule's ``runtime`` where the profile gives it in minutes (Snakemake's "2h" forms are not read)."""

    @property
    def name(self) -> str:
        """How the user named it: the folder, or the embedded default's hvdflow.yaml."""
        return str(self.folder) if self.folder is not None else f"{self.cluster.path} (the embedded default)"


def find_profile_folder(name: str, workdir: Path) -> Path:
    """The folder ``snakemake --profile name`` would read, run in ``workdir``: a path as given, else ``name`` in the
    working directory, then in the user's Snakemake profiles (``hvdflow profile install``), then ``profiles/name``
    of the workflow. ConfigError listing where it looked."""
    given = Path(name).expanduser()
    candidates = [given if given.is_absolute() else workdir / given]
    if "/" not in name:
        candidates += [snakemake_user_profiles() / name, workdir / "profiles" / name]
    for folder in candidates:
        if (folder / "config.yaml").is_file():
            return folder
    raise ConfigError(f"profile {name}: no config.yaml in {', '.join(str(c) for c in candidates)} "
                      "(`hvdflow profile install NAME` installs one of profiles/)")


def _train_resource(settings: Mapping[str, Any], key: str) -> Any:
    """The train rule's ``key`` under the profile's set-resources, else its default-resources."""
    for section in ((settings.get("set-resources") or {}).get("train") or {}, settings.get("default-resources") or {}):
        if isinstance(section, Mapping) and key in section:
            return section[key]
    return None


def _hvdflow_yaml(folder: Path, settings: Mapping[str, Any], workdir: Path) -> Path:
    """The profile's ``hvdflow_profile=`` entry of ``config:`` (relative to the working directory, as Snakemake
    passes it through)."""
    entries = settings.get("config") or []
    for entry in entries if isinstance(entries, list) else [entries]:
        key, _, value = str(entry).partition("=")
        if key.strip() == HVDFLOW_PROFILE_KEY:
            path = Path(value.strip()).expanduser()
            return path if path.is_absolute() else workdir / path
    raise ConfigError(f"{folder / 'config.yaml'}: config: has no {HVDFLOW_PROFILE_KEY}=<its hvdflow.yaml> entry")


def load_doctor_profile(name: Optional[str], workdir: Path) -> DoctorProfile:
    """The profile named as ``--profile`` names it; without a name, the embedded default (profiles/local)."""
    if name is None:
        return DoctorProfile(None, load_profile(workdir / "profiles" / "local" / "hvdflow.yaml"))
    folder = find_profile_folder(name, workdir)
    settings = load_mapping(folder / "config.yaml")
    runtime = _train_resource(settings, "runtime")
    return DoctorProfile(folder, load_profile(_hvdflow_yaml(folder, settings, workdir)),
                         _optional_str(_train_resource(settings, "slurm_partition")),
                         _optional_str(_train_resource(settings, "slurm_account")),
                         int(runtime) if str(runtime).isdigit() else None)


def _optional_str(value: Any) -> Optional[str]:
    return None if value is None or str(value) == "" else str(value)
