"""What ``hvdflow doctor`` asks Slurm's controller from the login node: the client and its version, and whether the
profile's train partition exists and is up, holds its time limit, has the GRES the profile counts per node, and
whether the profile's account is one of the user's."""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
from typing import Optional

from hvdflow.doctor.findings import Finding, failure, ok, warning
from hvdflow.doctor.profile_files import DoctorProfile

_GRES_GPU = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)*:(\d+)")


def _slurm(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


def slurm_minutes(limit: str) -> Optional[float]:
    """A Slurm time limit as sinfo prints it (``infinite``, ``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS``, ``MM``) in
    minutes; None for no limit."""
    if limit.lower() in ("infinite", "unlimited"):
        return None
    days, _, clock = limit.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if len(parts) == 1:
        hours, minutes, seconds = 0.0, parts[0], 0.0
    elif len(parts) == 2:
        hours, (minutes, seconds) = 0.0, parts
    else:
        hours, minutes, seconds = parts[-3:]
    return (float(days or 0) * 24 + hours) * 60 + minutes + seconds / 60


def client() -> Finding:
    """The Slurm client on PATH and its version."""
    if shutil.which("sinfo") is None:
        return failure("slurm client", "no sinfo on PATH", "load the site's Slurm module, or use a profile with "
                       "scheduler: none on a machine without Slurm")
    proc = _slurm("sinfo", "--version")
    if proc.returncode != 0:
        return failure("slurm client", f"sinfo --version failed: {proc.stderr.strip()[-300:]}",
                       "check that the Slurm controller answers (SLURM_CONF, munge)")
    return ok("slurm client", proc.stdout.strip())


def partition(profile: DoctorProfile) -> list[Finding]:
    """The train rule's partition: it exists and is up, its time limit holds the train rule's runtime, its nodes
    have the profile's ``gpus_per_node`` GPUs as GRES."""
    cluster = profile.cluster.slurm
    assert cluster is not None, "partition checks need a Slurm profile"
    name = profile.partition
    argv = ["sinfo", "--noheader", "--format=%P|%a|%l|%G|%D"] + (["--partition", name] if name else [])
    proc = _slurm(*argv)
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.strip()]
    if name is None:  # Slurm's default partition, marked with '*'
        rows = [row for row in rows if row[0].endswith("*")]
    if proc.returncode != 0 or not rows:
        said = proc.stderr.strip() or "sinfo lists no such partition"
        return [failure("partition", f"{name or 'the default partition'}: {said}",
                        "set slurm_partition under the profile's set-resources (train) to one `sinfo -s` lists")]
    title, state, limit, gres, nodes = rows[0][0].rstrip("*"), rows[0][1], rows[0][2], rows[0][3], rows[0][4]
    findings = []
    if state != "up":
        findings.append(failure("partition", f"{title} is {state}", "choose a partition that is up (sinfo -s)"))
    else:
        findings.append(_nodes(title, nodes, limit))
    runtime = profile.runtime_minutes
    most = slurm_minutes(limit)
    if runtime is not None and most is not None and runtime > most:
        findings.append(failure("time limit", f"the train rule asks {runtime} min; {title} allows {limit}",
                                f"set runtime under set-resources (train) to at most {int(most)} minutes: "
                                "hvdflow checkpoints and requeues long runs"))
    elif runtime is not None:
        findings.append(ok("time limit", f"the train rule's {runtime} min within {limit}"))
    findings.append(_gres(title, gres, cluster.gpus_per_node))
    return findings


USABLE_STATES = ("idle", "mixed", "allocated", "completing", "planned")
"""Node states (sinfo's ``%T``) of a node that runs jobs now or will when its jobs end: the others (drained,
draining, down, reserved, maint, fail, ...) take none."""


def node_states(title: str) -> dict[str, int]:
    """How many of the partition's nodes are in each state, as ``sinfo`` says (``%T``: ``idle``, ``drained``,
    ``idle~`` powered off, ``idle*`` not responding, ...)."""
    proc = _slurm("sinfo", "--noheader", f"--partition={title}", "--format=%T|%D")
    states: dict[str, int] = {}
    for state, _, count in (line.partition("|") for line in proc.stdout.splitlines() if "|" in line):
        states[state.strip()] = states.get(state.strip(), 0) + int(count)
    return states


def can_run_jobs(state: str) -> bool:
    """Whether a node in ``state`` can take a job now or when its jobs end: not one that does not respond (``*``) or
    is in a maintenance reservation (``$``); one powered off (``~``) or rebooting is powered up or back for it."""
    return "*" not in state and "$" not in state and state.rstrip("~#!%@^-") in USABLE_STATES


def _nodes(title: str, nodes: str, limit: str) -> Finding:
    states = node_states(title)
    said = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
    usable = sum(count for state, count in states.items() if can_run_jobs(state))
    if states and not usable:
        return failure("partition", f"{title}: up, {nodes} nodes, none of which can run a job ({said})",
                       "choose a partition with nodes that are up (sinfo -s), or ask the site when these return "
                       "(sinfo -R says why they are out)")
    return ok("partition", f"{title}: up, {nodes} nodes ({said or 'states not listed'}), time limit {limit}")


def _gres(title: str, gres: str, wanted: int) -> Finding:
    counts = [int(n) for n in _GRES_GPU.findall(gres)]
    if wanted == 0:
        return ok("gpus", f"the profile counts no GPUs (gpus_per_node: 0); {title}'s GRES: {gres}")
    if not counts:
        return failure("gpus", f"the profile counts {wanted} GPUs per node; {title}'s nodes have no gpu GRES ({gres})",
                       "choose the GPU partition, or set gpus_per_node: 0 in the profile's hvdflow.yaml")
    if max(counts) < wanted:
        return failure("gpus", f"the profile counts {wanted} GPUs per node; {title}'s nodes have {gres}",
                       f"set gpus_per_node: {max(counts)} in the profile's hvdflow.yaml")
    return ok("gpus", f"{title}'s nodes have {gres}; the profile uses {wanted} per node")


def account(profile: DoctorProfile) -> Finding:
    """The profile's account is one of the user's Slurm associations (none set: Slurm's default)."""
    user = getpass.getuser()
    proc = _slurm("sacctmgr", "--noheader", "--parsable2", "show", "associations", f"user={user}",
                  "format=account") if shutil.which("sacctmgr") else None
    if proc is None or proc.returncode != 0:
        said = "no sacctmgr" if proc is None else proc.stderr.strip()[-200:]
        return warning("account", f"cannot list {user}'s accounts ({said})",
                       "check slurm_account with `sacctmgr show assoc user=$USER` where it runs")
    accounts = sorted({line.strip() for line in proc.stdout.splitlines() if line.strip()})
    if profile.account is None:
        return ok("account", f"none set: Slurm's default for {user} (theirs: {', '.join(accounts) or 'none listed'})")
    if profile.account not in accounts:
        return failure("account", f"{profile.account} is not one of {user}'s accounts ({', '.join(accounts) or 'none'})",
                       "set slurm_account under the profile's default-resources to one of them")
    return ok("account", f"{profile.account}, one of {user}'s")
