"""hvdflow's own settings of a cluster profile (``profiles/<cluster>/hvdflow.yaml``), validated strictly.

Snakemake's ``config.yaml`` beside it maps rules to the cluster's scheduler; this file says how hvdflow runs there:
which registry, runtime and udocker mode, where udocker keeps its files, which launcher and network interface.
Values may use ``~``, ``$VARIABLE`` and ``${VARIABLE:-default}``; a variable that is not set and has no default is
an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .catalog import EXECMODES
from .errors import ConfigError
from .yamlfile import check_keys, expect, load_mapping

RUNTIMES = ("udocker", "native")
LAUNCHERS = ("gloo", "mpi")
_UNSET = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}")

_REQUIRED = ("registry", "runtime", "launcher")
_OPTIONAL = ("execmode", "udocker_dir", "network_interface", "native_venv_dir")


@dataclass(frozen=True)
class ClusterProfile:
    """How hvdflow runs on one cluster."""

    path: Path
    registry: str
    runtime: str
    launcher: str
    execmode: Optional[str]
    udocker_dir: Path
    network_interface: str
    native_venv_dir: Path


def _expand(where: str, value: Any) -> str:
    text = str(expect(where, value, (str, int)))
    defaulted = _DEFAULTED.sub(lambda m: os.environ.get(m.group(1)) or m.group(2), text)
    expanded = os.path.expanduser(os.path.expandvars(defaulted))
    missing = _UNSET.search(expanded)
    if missing:
        raise ConfigError(f"{where}: environment variable ${missing.group(1)} is not set (value {text!r})")
    return expanded


def _choice(where: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


def load_profile(path: Path) -> ClusterProfile:
    """Read and validate ``path``."""
    data = load_mapping(path)
    where = str(path)
    check_keys(where, data, _REQUIRED, _OPTIONAL)
    registry = _expand(f"{where}: registry", data["registry"]).rstrip("/")
    if not re.match(r"^https?://[^/\s]+$", registry):
        raise ConfigError(f"{where}: registry: {registry!r} must be http://HOST[:PORT] or https://HOST[:PORT]")
    execmode = data.get("execmode")
    home = Path.home()
    return ClusterProfile(
        path=path,
        registry=registry,
        runtime=_choice(f"{where}: runtime", _expand(f"{where}: runtime", data["runtime"]), RUNTIMES),
        launcher=_choice(f"{where}: launcher", _expand(f"{where}: launcher", data["launcher"]), LAUNCHERS),
        execmode=None if execmode is None else _choice(f"{where}: execmode", _expand(f"{where}: execmode", execmode), EXECMODES),
        udocker_dir=Path(_expand(f"{where}: udocker_dir", data.get("udocker_dir", str(home / ".local/share/hvdflow/udocker")))),
        network_interface=_expand(f"{where}: network_interface", data.get("network_interface", "lo")),
        native_venv_dir=Path(_expand(f"{where}: native_venv_dir", data.get("native_venv_dir", str(home / ".cache/hvdflow/native")))),
    )
