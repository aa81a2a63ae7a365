"""The two files of a site's profile as ``hvdflow site new`` writes them: Snakemake's ``config.yaml`` (the Slurm
plugin's resources) and ``hvdflow.yaml`` (hvdflow's settings), each value commented with where it came from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from hvdflow.site.choices import Chosen

COMMENT_COLUMN = 42


@dataclass(frozen=True)
class SiteProfile:
    """Every value of a new site's profile, with its origin."""

    name: str
    header: str
    """What was read, and when: the files' opening comment."""
    account: Chosen
    partition: Chosen
    partition_runtime: int
    train_partition: Chosen
    train_runtime: Chosen
    train_mem_mb: Chosen
    train_cpus_per_task: Chosen
    registry: Chosen
    execmode: Chosen
    network_interface: Chosen
    scratch_dir: Chosen
    gpus_per_node: Chosen
    gpu_type: Chosen


def _line(indent: int, key: str, value: object, said: Optional[str]) -> str:
    text = " " * indent + f"{key}: {json.dumps(value) if isinstance(value, (str, bool)) else value}"
    return text.ljust(COMMENT_COLUMN - 1) + f" # {said}" if said else text


def _header(site: SiteProfile, what: str) -> list[str]:
    words, lines = f"{what} of the cluster {site.name}, written by `hvdflow site new` {site.header}.".split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + len(word) > 114:
            lines.append("")
        lines[-1] = f"{lines[-1]} {word}".strip()
    return [f"# {line}" for line in lines] + [f"# Check it with: hvdflow doctor --profile {site.name}"]


def config_yaml(site: SiteProfile) -> str:
    """Snakemake's profile: the Slurm executor, the resources of every job and of the training jobs."""
    lines = _header(site, "Snakemake profile") + [
        "executor: slurm",
        _line(0, "jobs", 20, "Slurm jobs in flight at once"),
        "config:",
        f"  - hvdflow_profile=profiles/{site.name}/hvdflow.yaml",
        "default-resources:",
    ]
    if site.account.value is not None:
        lines.append(_line(2, "slurm_account", site.account.value, site.account.said))
    else:
        lines.append(f"  # slurm_account: not set ({site.account.said})")
    lines += [
        _line(2, "slurm_partition", site.partition.value, site.partition.said),
        _line(2, "runtime", site.partition_runtime, "minutes: preparation, evaluation, reports"),
        _line(2, "mem_mb", 4000, "per job"),
        _line(2, "cpus_per_task", 2, "preparation's chunks run in parallel"),
        "set-resources:",
        "  train:",
        _line(4, "slurm_partition", site.train_partition.value, site.train_partition.said),
        _line(4, "runtime", int(site.train_runtime.value or 0), site.train_runtime.said),
        _line(4, "mem_mb", int(site.train_mem_mb.value or 0), site.train_mem_mb.said),
        _line(4, "cpus_per_task", int(site.train_cpus_per_task.value or 0), site.train_cpus_per_task.said),
        "printshellcmds: true",
        "rerun-incomplete: true",
        "show-failed-logs: true",
        _line(0, "latency-wait", 60, "seconds: shared filesystems can be slow to show another node's outputs"),
        "slurm-keep-successful-logs: true",
        _line(0, "slurm-requeue", True, "a training job stopped on the time limit's warning requeues itself"),
        _line(0, "retries", 2, "a failed job is submitted again and resumes from its last checkpoint"),
    ]
    return "\n".join(lines) + "\n"


def hvdflow_yaml(site: SiteProfile) -> str:
    """hvdflow's settings of the cluster (checked by :mod:`hvdflow.config.profile`)."""
    lines = _header(site, "hvdflow's settings") + [
        _line(0, "registry", site.registry.value, site.registry.said),
        "runtime:",
        _line(2, "kind", "udocker", "no root, no admin"),
        _line(2, "execmode", site.execmode.value, site.execmode.said),
        _line(2, "proot", "image", "the image's seccomp-accelerated proot"),
        _line(2, "udocker_dir", "${HVDFLOW_UDOCKER_DIR:-~/.local/share/hvdflow/udocker}",
              "on the shared home: every node sees it"),
        _line(0, "launcher", "gloo", "srun starts one rank per task"),
        _line(0, "network_interface", site.network_interface.value, site.network_interface.said),
        _line(0, "cpu_bind", "cores", "each rank owns the train job's cpus_per_task"),
        "scheduler: slurm",
        "slurm:",
        _line(2, "scratch_dir", site.scratch_dir.value, site.scratch_dir.said),
        _line(2, "gpus_per_node", int(site.gpus_per_node.value or 0), site.gpus_per_node.said),
    ]
    if site.gpu_type.value is not None:
        lines.append(_line(2, "gpu_type", site.gpu_type.value, site.gpu_type.said))
    lines.append(_line(2, "signal_grace_seconds", 120, "SIGUSR1 this long before the time limit: the ranks checkpoint"))
    return "\n".join(lines) + "\n"
