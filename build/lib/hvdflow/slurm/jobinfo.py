"""What Slurm says about the job a train rule runs in, from its controller (``scontrol show job``).

The Slurm executor plugin's job step removes the allocation's ``SLURM_*`` variables (all but the job id and a few
others) from the environment the rule's body runs in: ``SLURM_CPUS_PER_TASK``, ``SLURM_RESTART_COUNT`` and
``SLURM_JOB_PARTITION`` never reach it. Where the environment still has a value it is used; otherwise the controller
is asked.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Mapping, Optional

from hvdflow.errors import LaunchError

_FIELD = re.compile(r"(?:^|\s)([A-Za-z/:]+)=(\S*)")


def current_job() -> str:
    """The id of the Slurm job this process runs in; LaunchError if it runs in none."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        raise LaunchError("the profile runs training through Slurm but this is not inside a Slurm job "
                          "(no $SLURM_JOB_ID): run with --profile profiles/<slurm cluster>, not a local profile")
    return job


def job_fields(text: str) -> dict[str, str]:
    """The ``Key=Value`` fields of ``scontrol show job --oneliner`` output (a value ends at the first space)."""
    return dict(_FIELD.findall(text))


def show_job(job: str) -> dict[str, str]:
    """The fields of ``scontrol show job --oneliner JOB`` (``Restarts``, ``CPUs/Task``, ``Partition``, ...), values
    as Slurm prints them; LaunchError if Slurm cannot say."""
    try:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"cannot ask Slurm about job {job}: {exc}") from None
    fields = job_fields(shown.stdout)
    if shown.returncode != 0 or "JobId" not in fields:
        raise LaunchError(f"scontrol show job {job} failed: {shown.stderr.strip() or shown.stdout[:200]}")
    return fields


def _number(job: str, fields: Mapping[str, str], key: str) -> int:
    value = fields.get(key, "")
    if not value.isdigit():
        raise LaunchError(f"scontrol show job {job} gave no {key} (got {value!r})")
    return int(value)


def restart_count(job: str, env: Mapping[str, str]) -> int:
    """How many times Slurm has restarted job ``job`` (requeues)."""
    restarts = env.get("SLURM_RESTART_COUNT")
    return int(restarts) if restarts is not None else _number(job, show_job(job), "Restarts")


def cpus_per_task(job: str, env: Mapping[str, str]) -> int:
    """The CPUs each task of job ``job`` owns (its ``--cpus-per-task``; Slurm's default is 1)."""
    cpus = env.get("SLURM_CPUS_PER_TASK")
    return int(cpus) if cpus is not None else _number(job, show_job(job), "CPUs/Task")


def allocation(job: str) -> dict[str, Optional[str]]:
    """The job's partition, account, CPUs per task, CPUs, time limit and restarts, for the run record (``None`` for
    what Slurm leaves unset)."""
    fields = show_job(job)
    keys = {"partition": "Partition", "account": "Account", "cpus_per_task": "CPUs/Task", "num_cpus": "NumCPUs",
            "time_limit": "TimeLimit", "restarts": "Restarts"}
    return {name: None if fields.get(key) in (None, "", "(null)") else fields[key] for name, key in keys.items()}


def start_time(job: str) -> float:
    """When job ``job`` (this run of it, after a requeue) started, as Unix time (Slurm's ``StartTime``, in the
    controller's local time, which the job's nodes share)."""
    value = show_job(job).get("StartTime", "")
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        raise LaunchError(f"scontrol show job {job} gave no StartTime (got {value!r})") from None


def job_nodes(job: str) -> list[str]:
    """The nodes job ``job`` holds now (its ``NodeList``, expanded); LaunchError if Slurm cannot say."""
    nodelist = show_job(job).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        return []
    try:
        return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60,
                              check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchError(f"cannot expand job {job}'s node list {nodelist}: {exc}") from None


UNHEALTHY_STATES = ("down", "drain", "fail", "maint", "reboot", "unknown", "future", "power")
"""Words in ``sinfo``'s node state (``%T``) that mean a node must not run new work; a trailing ``*`` (not responding)
means the same."""


def healthy_nodes(job: str) -> list[str]:
    """The nodes of job ``job`` (its ``NodeList`` now: with ``--no-kill`` a failed node leaves it) that Slurm does not
    report down, drained, failing or not responding; LaunchError if Slurm cannot say."""
    names = job_nodes(job)
    if not names:
        return []
    try:
        states = subprocess.run(["sinfo", "--noheader", "--Node", f"--nodes={','.join(names)}", "--format=%N %T"],
                                capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchError(f"cannot ask Slurm which nodes of job {job} are healthy: {exc}") from None
    state = dict(line.split(None, 1) for line in states.splitlines() if len(line.split()) == 2)
    return [n for n in names if n in state and not state[n].endswith("*")
            and not any(word in state[n].lower() for word in UNHEALTHY_STATES)]
