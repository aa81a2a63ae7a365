"""A user's own Keras model, as an experiment names it: a folder of the user's Python modules and the function in it
that builds the model (``model: {code: models/, build: unet:build, params: {...}}``).

The folder is bound into every container of the run and its files are recorded with their sha256 (the run's
identity holds their tree hash, so a checkpoint of other code is never resumed).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.errors import ConfigError
from hvdflow.files.cache import sha256_file

SKIPPED = ("__pycache__", ".git", ".ipynb_checkpoints")
"""Folders of the user's code that are not code (bytecode caches, a nested repository, notebook copies)."""


def code_files(folder: Path) -> dict[str, str]:
    """Every file of ``folder`` (relative POSIX path -> sha256), bytecode caches and hidden folders left out."""
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in SKIPPED or part.startswith(".") for part in relative.parts) or path.suffix == ".pyc":
            continue
        if path.is_file():
            files[relative.as_posix()] = sha256_file(path)
    return files


def tree_sha256(files: Mapping[str, str]) -> str:
    """One sha256 for a folder's files (their paths and contents): equal exactly when every file is."""
    return hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in sorted(files.items())).encode()).hexdigest()


@dataclass(frozen=True)
class UserModel:
    """An experiment's own code: a Keras model that ``build`` (``module:function``) in the folder ``code`` returns,
    called with ``params``, ``loss`` and ``metrics`` (``module:function``) replacing hvdflow's for the task where
    given; or a training ``script`` of that folder that runs its own loop with hvdflow's script API
    (:mod:`hvdflow_trainer.script`), ``params`` its ``run.params``."""

    code: Path
    build: Optional[str]
    params: Mapping[str, Any] = field(default_factory=dict)
    loss: Optional[str] = None
    metrics: Optional[str] = None
    script: Optional[str] = None

    @classmethod
    def from_config(cls, where: str, value: Mapping[str, Any], root: Path) -> "UserModel":
        """The model of a validated ``experiments.<name>.model`` mapping, its folder resolved against ``root`` (the
        workflow's); ConfigError naming ``where`` if the folder, the build, loss or metrics function's module or the
        script is not there, or does not parse."""
        code = code_folder(f"{where}.code", str(value["code"]), root)
        script = value.get("script")
        if script is None:
            check_module(f"{where}.build", code, str(value["build"]))
        elif not (code / str(script)).is_file():
            raise ConfigError(f"{where}.script: {script} is not a file of {code}")
        else:
            check_parses(f"{where}.script", code / str(script))
        for key in ("loss", "metrics"):
            if value.get(key):
                check_module(f"{where}.{key}", code, str(value[key]))
        return cls(code, value.get("build"), dict(value.get("params") or {}), value.get("loss"), value.get("metrics"),
                   None if script is None else str(script))

    @property
    def entry(self) -> str:
        """What runs: the build function (``module:function``) or the script (its path in the folder)."""
        return str(self.script or self.build)

    def trainer_args(self) -> list[str]:
        """The trainer's options that name this model (:mod:`hvdflow_trainer.user_code`)."""
        runs = ["--model-script", str(self.script)] if self.script else ["--model-build", str(self.build)]
        return (["--model-code", str(self.code), *runs, "--model-params", json.dumps(dict(self.params), sort_keys=True)]
                + (["--model-loss", self.loss] if self.loss else [])
                + (["--model-metrics", self.metrics] if self.metrics else []))

    def files(self) -> dict[str, str]:
        """The folder's files with their sha256 (:func:`code_files`)."""
        return code_files(self.code)


def code_folder(where: str, value: str, root: Path) -> Path:
    """The user's code folder ``value`` resolved against ``root``; ConfigError naming ``where`` if it is none."""
    code = (root / value).resolve()
    if not code.is_dir():
        raise ConfigError(f"{where}: {value} is not a folder (looked for {code})")
    return code


def check_module(where: str, code: Path, ref: str) -> None:
    """ConfigError naming ``where`` unless the module of ``ref`` (``module:function``) is a file of ``code`` that
    parses."""
    module = ref.split(":", 1)[0]
    base = code.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            check_parses(where, path)
            return
    raise ConfigError(f"{where}: {ref}: no module {module} in {code} (looked for {module.replace('.', '/')}.py "
                      f"and {module.replace('.', '/')}/__init__.py)")


def check_parses(where: str, path: Path) -> None:
    """ConfigError naming ``where``, the file and the line where the user's Python file ``path`` does not parse (read
    by this host's Python, before any job starts)."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ConfigError(f"{where}: {path}, line {exc.lineno}: {exc.msg} (the file does not parse; read by Python "
                          f"{sys.version_info[0]}.{sys.version_info[1]} before any job)") from None
