"""What ``hvdflow doctor`` asks Slurm's controller from the login node: the client and its version, and whether the
profile's train partition exists and is up, holds its time limit, has the GRES the profile counts per node, and
whether the profile's account is one of the user's."""

from __future__ import annotations

import shutil

from hvdflow.doctor.findings import Finding, failure, ok, warning
from hvdflow.doctor.profile_files import DoctorProfile
from hvdflow.slurm.cluster_info import (
    SINFO_FORMAT,
    Partition,
    accounts,
    can_run_jobs,
    parse_partitions,
    slurm,
    slurm_minutes,
)


def client() -> Finding:
    """The Slurm client on PATH and its version."""
    if shutil.which("sinfo") is None:
        return failure("slurm client", "no sinfo on PATH", "load the site's Slurm module, or use a profile with "
                       "scheduler: none on a machine without Slurm")
    proc = slurm("sinfo", "--version")
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
    argv = ["sinfo", "--noheader", f"--format={SINFO_FORMAT}"] + (["--partition", name] if name else [])
    proc = slurm(*argv)
    found = parse_partitions(proc.stdout) if proc.returncode == 0 else []
    if name is None:  # Slurm's default partition, marked with '*'
        found = [part for part in found if part.default]
    if not found:
        said = proc.stderr.strip() or "sinfo lists no such partition"
        return [failure("partition", f"{name or 'the default partition'}: {said}",
                        "set slurm_partition under the profile's set-resources (train) to one `sinfo -s` lists")]
    part = found[0]
    findings = []
    if part.available != "up":
        findings.append(failure("partition", f"{part.name} is {part.available}", "choose a partition that is up (sinfo -s)"))
    else:
        findings.append(_nodes(part.name, str(part.nodes), part.time_limit))
    runtime = profile.runtime_minutes
    most = slurm_minutes(part.time_limit)
    if runtime is not None and most is not None and runtime > most:
        findings.append(failure("time limit", f"the train rule asks {runtime} min; {part.name} allows {part.time_limit}",
                                f"set runtime under set-resources (train) to at most {int(most)} minutes: "
                                "hvdflow checkpoints and requeues long runs"))
    elif runtime is not None:
        findings.append(ok("time limit", f"the train rule's {runtime} min within {part.time_limit}"))
    findings.append(_gres(part, cluster.gpus_per_node, cluster.gpu_type))
    return findings


def node_states(title: str) -> dict[str, int]:
    """How many of the partition's nodes are in each state, as ``sinfo`` says (``%T``: ``idle``, ``drained``,
    ``idle~`` powered off, ``idle*`` not responding, ...)."""
    proc = slurm("sinfo", "--noheader", f"--partition={title}", "--format=%T|%D")
    states: dict[str, int] = {}
    for state, _, count in (line.partition("|") for line in proc.stdout.splitlines() if "|" in line):
        states[state.strip()] = states.get(state.strip(), 0) + int(count)
    return states


def _nodes(title: str, nodes: str, limit: str) -> Finding:
    states = node_states(title)
    said = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
    usable = sum(count for state, count in states.items() if can_run_jobs(state))
    if states and not usable:
        return failure("partition", f"{title}: up, {nodes} nodes, none of which can run a job ({said})",
                       "choose a partition with nodes that are up (sinfo -s), or ask the site when these return "
                       "(sinfo -R says why they are out)")
    return ok("partition", f"{title}: up, {nodes} nodes ({said or 'states not listed'}), time limit {limit}")


def _gres(part: Partition, wanted: int, gpu_type: str | None) -> Finding:
    title, said = part.name, part.gres_text()
    if wanted == 0:
        return ok("gpus", f"the profile counts no GPUs (gpus_per_node: 0); {title}'s nodes: {said}")
    kinds = part.gpu_types()
    if not kinds:
        return failure("gpus", f"the profile counts {wanted} GPUs per node; {title}'s nodes have no gpu GRES",
                       "choose the GPU partition, or set gpus_per_node: 0 in the profile's hvdflow.yaml")
    if gpu_type is not None and gpu_type not in kinds:
        typed = ", ".join(sorted(k for k in kinds if k)) or "none (untyped GRES)"
        return failure("gpus", f"the profile asks GPU type {gpu_type}; {title}'s nodes have {said}",
                       f"set slurm.gpu_type in the profile's hvdflow.yaml to one of the types there: {typed}")
    most = part.gpus_per_node(gpu_type)
    if most < wanted:
        return failure("gpus", f"the profile counts {wanted} {gpu_type + ' ' if gpu_type else ''}GPUs per node; "
                       f"{title}'s nodes have {said}", f"set gpus_per_node: {most} in the profile's hvdflow.yaml")
    return ok("gpus", f"{title}'s nodes have {said}; the profile uses {wanted} "
              f"{gpu_type + ' ' if gpu_type else ''}per node")


def account(profile: DoctorProfile) -> Finding:
    """The profile's account is one of the user's Slurm associations (none set: Slurm's default)."""
    known = accounts()
    if known.said:
        return warning("account", f"cannot list {known.user}'s accounts ({known.said})",
                       "check slurm_account with `sacctmgr show assoc user=$USER` where it runs")
    listed = ", ".join(known.accounts) or "none listed"
    if profile.account is None:
        return ok("account", f"none set: Slurm's default for {known.user} (theirs: {listed})")
    if profile.account not in known.accounts:
        return failure("account", f"{profile.account} is not one of {known.user}'s accounts ({listed})",
                       "set slurm_account under the profile's default-resources to one of them")
    return ok("account", f"{profile.account}, one of {known.user}'s")
