"""Strict reading of hvdflow's YAML files into plain dictionaries."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from hvdflow.errors import ConfigError

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (its wheels are): the config schema in 4.8 ms against 52 ms,
which every Snakemake process of a run (the main one and one per job) pays for the schema, profile and catalogue."""

_UNSET = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}")


def syntax_error(path: Path, exc: yaml.YAMLError) -> ConfigError:
    """The error for a YAML file that does not parse: the file, the line and column (1-based) and PyYAML's words
    (``config/config.yaml, line 3, column 12: not valid YAML: expected ',' or ']', but got '<stream end>'``)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc)
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and start is not None:
        context += f" that starts at line {start.line + 1}, column {start.column + 1}"
    return ConfigError(f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else ""))


def parse_yaml(path: Path) -> Any:
    """The content of the YAML file ``path``; ConfigError naming the file (and the line and column of a syntax
    error) if it is missing or does not parse."""
    try:
        return yaml.load(path.read_text(), Loader=_LOADER)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise syntax_error(path, exc) from None


def load_mapping(path: Path) -> dict[str, Any]:
    """Load ``path`` and require a mapping at its top level."""
    data = parse_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def check_keys(where: str, data: dict[str, Any], required: Iterable[str], optional: Iterable[str] = ()) -> None:
    """Raise a ConfigError naming ``where`` if ``data`` lacks a required key or has an unknown one."""
    required = list(required)
    allowed = set(required) | set(optional)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(allowed))}")
    missing = [key for key in required if key not in data]
    if missing:
        raise ConfigError(f"{where}: missing required key(s) {', '.join(missing)}")


def expect(where: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    """Return ``value`` if it is of ``kind``, else raise a ConfigError naming ``where``."""
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}: expected {names}, got {value!r}")
    return value


def expanded(where: str, value: Any) -> str:
    """A setting's text with ``~``, ``$VARIABLE`` and ``${VARIABLE:-default}`` expanded (a default also where the
    variable is empty); ConfigError naming ``where`` for a variable that is not set and has no default."""
    text = str(expect(where, value, (str, int)))
    defaulted = _DEFAULTED.sub(lambda m: os.environ.get(m.group(1)) or m.group(2), text)
    result = os.path.expanduser(os.path.expandvars(defaulted))
    missing = _UNSET.search(result)
    if missing:
        raise ConfigError(f"{where}: environment variable ${missing.group(1)} is not set (value {text!r})")
    return result
