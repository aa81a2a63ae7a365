"""Installing a cluster profile where Snakemake looks a bare profile name up, so ``snakemake --profile cluster`` works.

Snakemake 9 resolves ``--profile NAME`` (no slash) in the working directory, then the user's config folder
(``$XDG_CONFIG_HOME/snakemake``, default ``~/.config/snakemake``), then the site's (``/etc/xdg/snakemake``); it
never looks in the workflow's ``profiles/``. Installing copies ``profiles/<name>/`` (Snakemake's ``config.yaml`` and
hvdflow's ``hvdflow.yaml``) into the user's folder under the chosen name. Snakemake passes ``config:`` entries of a
profile through as written, relative to the working directory, so the copy's ``hvdflow_profile=`` entry is rewritten
to the installed ``hvdflow.yaml`` by absolute path: the installed profile is whole on its own.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from hvdflow.errors import ConfigError
from hvdflow.files.atomic import write_text_atomic

PROFILE_FILES = ("config.yaml", "hvdflow.yaml")
_HVDFLOW_PROFILE = re.compile(r"^(\s*-\s*)hvdflow_profile=\S+", re.MULTILINE)


def snakemake_user_profiles() -> Path:
    """The user's profile folder that Snakemake searches for a bare ``--profile NAME`` (as Snakemake computes it)."""
    return Path(platformdirs.AppDirs("snakemake", "snakemake").user_config_dir)


@dataclass(frozen=True)
class InstalledProfile:
    """Where a profile was installed from and to, and whether anything changed."""

    name: str
    source: Path
    target: Path
    changed: bool


def installed_config(source_config: str, hvdflow_yaml: Path, source: Path) -> str:
    """``config.yaml`` of ``source`` with its ``hvdflow_profile=`` entry naming ``hvdflow_yaml``; ConfigError if none."""
    text, count = _HVDFLOW_PROFILE.subn(lambda m: f"{m.group(1)}hvdflow_profile={hvdflow_yaml}", source_config)
    if count != 1:
        raise ConfigError(f"{source / 'config.yaml'}: expected one 'hvdflow_profile=' entry under config:, found {count}")
    return text


def install_profile(source: Path, name: str, force: bool = False, root: Path | None = None) -> InstalledProfile:
    """Install the profile folder ``source`` as ``name`` in Snakemake's user profile folder (or ``root``).

    An existing profile of that name that differs is replaced only with ``force``; ConfigError names what is wrong.
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"profile name {name!r}: use letters, digits, '.', '_' and '-' (Snakemake takes a name with a "
                          "slash for a path)")
    missing = [f for f in PROFILE_FILES if not (source / f).is_file()]
    if missing:
        known = sorted(p.name for p in source.parent.iterdir() if (p / "hvdflow.yaml").is_file()) \
            if source.parent.is_dir() else []
        raise ConfigError(f"{source} is not a cluster profile: it lacks {', '.join(missing)}"
                          + (f" (profiles in {source.parent}: {', '.join(known)})" if known else ""))
    target = (root or snakemake_user_profiles()) / name
    wanted = {"hvdflow.yaml": (source / "hvdflow.yaml").read_text(),
              "config.yaml": installed_config((source / "config.yaml").read_text(), target / "hvdflow.yaml", source)}
    current = {f: (target / f).read_text() for f in PROFILE_FILES if (target / f).is_file()}
    if current == wanted:
        return InstalledProfile(name, source, target, changed=False)
    if target.exists() and not force:
        raise ConfigError(f"{target} exists and differs from {source}: pass --force to replace it")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for file_name, text in wanted.items():
        write_text_atomic(target / file_name, text)
    return InstalledProfile(name, source, target, changed=True)
