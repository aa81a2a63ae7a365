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
from typing import Any, Mapping, Optional

from hvdflow.config.profile_schema import (
    DEFAULT_ELASTIC_COOLDOWN,
    DEFAULT_ELASTIC_TIMEOUT,
    DEFAULT_SIGNAL_GRACE,
    GPU_TYPE_PATTERN,
    LAUNCHERS,
    LOCAL_CPU_BINDS,
    SCHEDULERS,
    SCHEMA,
    keys,
)
from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import check_keys, expanded, expect, load_mapping
from hvdflow.images.offline import NO_REGISTRY
from hvdflow.runtime import FLAT_KEYS, RuntimeSettings, runtime_settings, section_from_flat

_REQUIRED, _OPTIONAL = keys(SCHEMA)
_SLURM_REQUIRED, _SLURM_OPTIONAL = keys(SCHEMA["properties"]["slurm"])
_SRUN_CPU_BIND = re.compile(r"^((verbose|quiet),)?(none|cores|threads|sockets|ldoms|rank|rank_ldom|boards|"
                            r"(map|mask)_(cpu|ldom):[0-9a-fA-Fx*,]+)$")
"""The values of srun's ``--cpu-bind`` (srun(1)), optionally after ``verbose,``."""


@dataclass(frozen=True)
class SlurmCluster:
    """The Slurm side of a cluster profile: node-local scratch, GPUs per node, network, extra srun flags, and how
    long before the time limit Slurm warns the training job (SIGUSR1; 0: no warning, only the limit's SIGTERM)."""

    scratch_dir: str
    """Node-local scratch as the profile writes it: its ``$VAR`` and ``${VAR:-default}`` are expanded inside the job
    (:meth:`job_scratch_dir`), where a site's per-job ``$TMPDIR`` is set, not on the login node."""
    gpus_per_node: int
    network_interface: str
    srun_extra: tuple[str, ...] = ()
    signal_grace_seconds: int = DEFAULT_SIGNAL_GRACE
    cpu_bind: str = "cores"
    """srun's ``--cpu-bind`` for the ranks' job steps (the profile's top-level ``cpu_bind``)."""
    gpu_type: Optional[str] = None
    """The GRES type the jobs ask for (``gpu:<type>:N``); None: any type (``gpu:N``)."""

    def gpu_gres(self, count: int) -> str:
        """The GRES of ``count`` GPUs as Slurm takes it (``--gres``): ``gpu:<type>:N``, or ``gpu:N`` without a type."""
        return f"gpu:{self.gpu_type}:{count}" if self.gpu_type else f"gpu:{count}"

    def job_scratch_dir(self) -> Path:
        """The scratch folder in this job's environment (ConfigError naming a variable the job does not set)."""
        return Path(expanded("slurm.scratch_dir", self.scratch_dir))


@dataclass(frozen=True)
class ClusterProfile:
    """How hvdflow runs on one cluster."""

    path: Path
    registry: str
    """The registry's URL, or ``none``: the images the lock pins come from ``hvdflow image load`` (air-gapped)."""
    runtime: RuntimeSettings
    """The ``runtime:`` section: the kind, its image store's folder and the kind's own settings."""
    launcher: str
    network_interface: str
    slurm: Optional[SlurmCluster] = None
    step_timeout: Optional[float] = None
    """Seconds one pipeline step may run (``step_timeout_minutes``); None: no limit of hvdflow's own (under Slurm,
    the job's time limit is the limit)."""
    cpu_bind: str = "cores"
    """How ranks are bound to cores: ``cores`` or ``none`` on one machine; srun's ``--cpu-bind`` value under Slurm."""
    elastic_cooldown: int = DEFAULT_ELASTIC_COOLDOWN
    """Seconds a host on which an elastic run's worker failed stays out before it may run workers again."""
    elastic_timeout: int = DEFAULT_ELASTIC_TIMEOUT
    """Seconds an elastic run waits for at least ``min_ranks`` slots (at the start and after a failure)."""


def _choice(where: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


def load_profile(path: Path) -> ClusterProfile:
    """Read and validate ``path``."""
    data = load_mapping(path)
    where = str(path)
    _refuse_old_runtime_keys(where, data)
    check_keys(where, data, _REQUIRED, _OPTIONAL)
    registry = expanded(f"{where}: registry", data["registry"]).rstrip("/")
    if registry != NO_REGISTRY and not re.match(r"^https?://[^/\s]+$", registry):
        raise ConfigError(f"{where}: registry: {registry!r} must be http://HOST[:PORT], https://HOST[:PORT] or "
                          f"{NO_REGISTRY} (no registry: images come from `hvdflow image load`)")
    scheduler = _choice(f"{where}: scheduler", expanded(f"{where}: scheduler", data.get("scheduler", "none")), SCHEDULERS)
    interface = expanded(f"{where}: network_interface", data.get("network_interface", "auto" if scheduler == "slurm" else "lo"))
    if scheduler == "slurm" and "slurm" not in data:
        raise ConfigError(f"{where}: scheduler slurm needs a slurm section ({', '.join(_SLURM_REQUIRED)})")
    if scheduler == "none" and "slurm" in data:
        raise ConfigError(f"{where}: slurm: given but scheduler is none (set scheduler: slurm)")
    cpu_bind = _cpu_bind(f"{where}: cpu_bind", expanded(f"{where}: cpu_bind", data.get("cpu_bind", "cores")), scheduler)
    launcher = _choice(f"{where}: launcher", expanded(f"{where}: launcher", data["launcher"]), LAUNCHERS)
    return ClusterProfile(
        path=path,
        registry=registry,
        runtime=runtime_settings(f"{where}: runtime", data["runtime"], launcher),
        launcher=launcher,
        network_interface=interface,
        slurm=_slurm(f"{where}: slurm", data["slurm"], interface, cpu_bind) if scheduler == "slurm" else None,
        step_timeout=_minutes(f"{where}: step_timeout_minutes", data.get("step_timeout_minutes")),
        cpu_bind=cpu_bind,
        # Horovod's driver takes cooldowns of 1 s to 1 h
        elastic_cooldown=_seconds(f"{where}: elastic_cooldown_seconds",
                                  data.get("elastic_cooldown_seconds", DEFAULT_ELASTIC_COOLDOWN), 1, 3600),
        elastic_timeout=_seconds(f"{where}: elastic_timeout_seconds",
                                 data.get("elastic_timeout_seconds", DEFAULT_ELASTIC_TIMEOUT), 1, 86400),
    )


def _refuse_old_runtime_keys(where: str, data: Mapping[str, Any]) -> None:
    """ConfigError for a profile written before the runtime's keys moved into its ``runtime:`` section, saying the
    section that holds them now."""
    old = [key for key in FLAT_KEYS if key in data]
    if isinstance(data.get("runtime"), str) or old:
        section = ", ".join(f"{key}: {value}" for key, value in section_from_flat(data).items())
        raise ConfigError(f"{where}: runtime{', ' if old else ''}{', '.join(old)}: the runtime's keys are now one "
                          f"section; write runtime: {{{section}}} (docs/reference/profile.md)")


def _seconds(where: str, value: Any, low: int, high: int) -> int:
    seconds = expect(where, value, int)
    if isinstance(seconds, bool) or not low <= seconds <= high:
        raise ConfigError(f"{where}: must be {low} to {high} seconds, got {value!r}")
    return int(seconds)


def _cpu_bind(where: str, value: str, scheduler: str) -> str:
    if scheduler == "slurm":
        if not _SRUN_CPU_BIND.match(value):
            raise ConfigError(f"{where}: {value!r} is not a value of srun's --cpu-bind (cores, threads, sockets, "
                              "ldoms, rank, none, map_cpu:LIST, mask_cpu:LIST, ...)")
        return value
    return _choice(where, value, LOCAL_CPU_BINDS)


def _minutes(where: str, value: Any) -> Optional[float]:
    if value is None:
        return None
    minutes = expect(where, value, (int, float))
    if isinstance(minutes, bool) or minutes <= 0:
        raise ConfigError(f"{where}: must be a positive number of minutes, got {value!r}")
    return float(minutes) * 60


def _slurm(where: str, data: Any, interface: str, cpu_bind: str) -> SlurmCluster:
    expect(where, data, dict)
    check_keys(where, data, _SLURM_REQUIRED, _SLURM_OPTIONAL)
    gpus = expect(f"{where}.gpus_per_node", data["gpus_per_node"], int)
    if gpus < 0:
        raise ConfigError(f"{where}.gpus_per_node: must be 0 (no GPUs) or more, got {gpus}")
    extra = expect(f"{where}.srun_extra", data.get("srun_extra", []), list)
    grace = expect(f"{where}.signal_grace_seconds", data.get("signal_grace_seconds", DEFAULT_SIGNAL_GRACE), int)
    if not 0 <= grace <= 65535:
        raise ConfigError(f"{where}.signal_grace_seconds: must be 0 (no warning) to 65535 seconds, got {grace}")
    scratch = str(expect(f"{where}.scratch_dir", data["scratch_dir"], str))
    if not os.path.isabs(scratch) and not scratch.startswith(("$", "~")):
        raise ConfigError(f"{where}.scratch_dir: must be an absolute path or start with a variable such as $TMPDIR, "
                          f"got {scratch!r}")
    gpu_type = data.get("gpu_type")
    if gpu_type is not None:
        gpu_type = expanded(f"{where}.gpu_type", expect(f"{where}.gpu_type", gpu_type, str))
        if not re.match(GPU_TYPE_PATTERN, gpu_type):
            raise ConfigError(f"{where}.gpu_type: {gpu_type!r} is not a GRES type (letters, digits, _ . -; "
                              "`sinfo -o %G` lists the partition's, e.g. gpu:a100:4 has type a100)")
        if gpus == 0:
            raise ConfigError(f"{where}.gpu_type: {gpu_type} given but gpus_per_node is 0 (no GPUs asked)")
    return SlurmCluster(scratch_dir=scratch, gpus_per_node=gpus, gpu_type=gpu_type,
                        network_interface=interface,
                        srun_extra=tuple(expanded(f"{where}.srun_extra", item) for item in extra),
                        signal_grace_seconds=grace, cpu_bind=cpu_bind)


def profile_settings(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The ``hvdflow.yaml`` settings that load back into the profile a run record holds (its ``profile``: a
    ClusterProfile as JSON), so a rerun runs where and how the recorded run did. They are written in the layout of
    the code that made the record, which is the code the rerun runs (the recorded revision's worktree): a
    record_version 2 or 3 profile's ``runtime:`` section as it was, a version 1 profile's runtime keys at the top level."""
    settings: dict[str, Any] = {
        "registry": recorded["registry"], "launcher": recorded["launcher"],
        "network_interface": recorded["network_interface"], "cpu_bind": recorded["cpu_bind"],
        "scheduler": "none" if recorded["slurm"] is None else "slurm",
    }
    if isinstance(recorded["runtime"], Mapping):
        settings["runtime"] = recorded_runtime(recorded)
    else:
        settings.update({"runtime": recorded["runtime"], "proot": recorded["proot"],
                         "udocker_dir": str(recorded["udocker_dir"]), "native_venv_dir": str(recorded["native_venv_dir"])})
        if recorded["execmode"] is not None:
            settings["execmode"] = recorded["execmode"]
    for key in ("elastic_cooldown", "elastic_timeout"):  # records made before elastic runs have neither
        if key in recorded:
            settings[f"{key}_seconds"] = recorded[key]
    if recorded["step_timeout"] is not None:
        settings["step_timeout_minutes"] = float(recorded["step_timeout"]) / 60
    slurm = recorded["slurm"]
    if slurm is not None:
        settings["slurm"] = {"scratch_dir": str(slurm["scratch_dir"]), "gpus_per_node": slurm["gpus_per_node"],
                             "srun_extra": list(slurm["srun_extra"]), "signal_grace_seconds": slurm["signal_grace_seconds"]}
        if slurm.get("gpu_type"):  # records made before gpu_type have none
            settings["slurm"]["gpu_type"] = slurm["gpu_type"]
    return settings


def recorded_runtime(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The ``runtime:`` section of the recorded profile ``recorded``: its kind, image store and the kind's own
    settings as written (record_version 2 and 3), or made from the top-level keys of a record_version 1 profile."""
    runtime = recorded["runtime"]
    if isinstance(runtime, Mapping):
        return {"kind": runtime["kind"], "udocker_dir": str(runtime["udocker_dir"]),
                **{key: value for key, value in runtime["options"].items() if value is not None}}
    return section_from_flat(recorded)
