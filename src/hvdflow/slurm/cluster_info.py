"""What Slurm's controller says of the cluster, asked from a login node without privileges: the partitions as
``sinfo`` lists them (state, time limit, nodes, cores, memory, GPUs by GRES type), the controller's configuration
(``scontrol show config``) and the user's accounts (``sacctmgr``). ``hvdflow site new`` and ``hvdflow doctor``
read the cluster through these.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from hvdflow.errors import HvdflowError

_GRES_GPU = re.compile(r"^gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")
SINFO_FORMAT = "%P|%a|%l|%D|%c|%m|%G|%T"
"""One ``sinfo`` row per group of a partition's nodes alike in cores, memory, GRES and state."""


class SlurmQueryError(HvdflowError):
    """A Slurm client command failed; the message names it and what it said."""


def slurm(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command (60 s at most), its output captured as text."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _checked(*argv: str) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmQueryError(f"no {argv[0]} on PATH: load the site's Slurm module (or run this on a login node)")
    proc = slurm(*argv)
    if proc.returncode != 0:
        raise SlurmQueryError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return proc.stdout


def gpu_gres(gres: str) -> dict[Optional[str], int]:
    """The GPUs in one node group's GRES as ``sinfo`` prints it (``gpu:a100:4(S:0-1),gpu:h100:2``, ``gpu:4``,
    ``(null)``): count per type, None for an untyped count."""
    counts: dict[Optional[str], int] = {}
    for item in re.split(r",(?![^()]*\))", gres):
        match = _GRES_GPU.match(item.strip())
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0) + int(match.group(2))
    return counts


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


USABLE_STATES = ("idle", "mixed", "allocated", "completing", "planned")
"""Node states (sinfo's ``%T``) of a node that runs jobs now or will when its jobs end: the others (drained,
draining, down, reserved, maint, fail, ...) take none."""


def can_run_jobs(state: str) -> bool:
    """Whether a node in ``state`` can take a job now or when its jobs end: not one that does not respond (``*``) or
    is in a maintenance reservation (``$``); one powered off (``~``) or rebooting is powered up or back for it."""
    return "*" not in state and "$" not in state and state.rstrip("~#!%@^-") in USABLE_STATES


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one partition alike in what ``sinfo`` shows: how many, their cores, memory, GPUs and state."""

    nodes: int
    cpus: int
    memory_mb: int
    gpus: dict[Optional[str], int]
    state: str


@dataclass(frozen=True)
class Partition:
    """One partition: its name, whether it is the default, its availability and time limit, its node groups."""

    name: str
    default: bool
    available: str
    time_limit: str
    groups: list[NodeGroup] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        """Its nodes, in every state."""
        return sum(g.nodes for g in self.groups)

    def gpu_types(self) -> dict[Optional[str], tuple[int, int]]:
        """Per GPU type (None: untyped): the most GPUs of that type one node has, and how many nodes have any."""
        seen: dict[Optional[str], tuple[int, int]] = {}
        for group in self.groups:
            for kind, count in group.gpus.items():
                most, nodes = seen.get(kind, (0, 0))
                seen[kind] = (max(most, count), nodes + group.nodes)
        return seen

    def gres_text(self) -> str:
        """The partition's GPUs as a reader wants them: ``gpu:a100:4 on 2 nodes, gpu:h100:2 on 1 node``."""
        return ", ".join(f"gpu:{kind + ':' if kind else ''}{most} on {nodes} node{'s' if nodes != 1 else ''}"
                         for kind, (most, nodes) in self.gpu_types().items()) or "no GPUs"

    def gpus_per_node(self, gpu_type: Optional[str] = None) -> int:
        """The most GPUs (of ``gpu_type``; None: of any type, all types of a node together) one node has."""
        if gpu_type is None:
            return max((sum(g.gpus.values()) for g in self.groups), default=0)
        return self.gpu_types().get(gpu_type, (0, 0))[0]

    def usable_nodes(self) -> int:
        """Its nodes that run jobs now or will when their jobs end (idle, mixed, allocated, completing)."""
        return sum(g.nodes for g in self.groups if can_run_jobs(g.state))

    @property
    def cpus_per_node(self) -> int:
        """The fewest cores a node has (what a job can count on)."""
        return min((g.cpus for g in self.groups), default=0)

    @property
    def memory_mb(self) -> int:
        """The least memory a node has, in MB."""
        return min((g.memory_mb for g in self.groups), default=0)


def _int(text: str) -> int:
    match = re.match(r"\d+", text.strip())
    return int(match.group(0)) if match else 0


def parse_partitions(sinfo_output: str) -> list[Partition]:
    """The partitions in ``sinfo --noheader --format=`` :data:`SINFO_FORMAT` output, in sinfo's order."""
    partitions: dict[str, Partition] = {}
    for line in sinfo_output.splitlines():
        fields = line.split("|")
        if len(fields) != 8:
            continue
        name, available, limit, nodes, cpus, memory, gres, state = (f.strip() for f in fields)
        title = name.rstrip("*")
        part = partitions.setdefault(title, Partition(title, name.endswith("*"), available, limit))
        part.groups.append(NodeGroup(_int(nodes), _int(cpus), _int(memory), gpu_gres(gres), state))
    return list(partitions.values())


def partitions() -> list[Partition]:
    """Every partition the user may see, from ``sinfo``."""
    return parse_partitions(_checked("sinfo", "--noheader", f"--format={SINFO_FORMAT}"))


def parse_config(scontrol_output: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = Value`` lines as a mapping."""
    config = {}
    for line in scontrol_output.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def controller_config() -> dict[str, str]:
    """The controller's configuration (``scontrol show config``)."""
    return parse_config(_checked("scontrol", "show", "config"))


@dataclass(frozen=True)
class Accounts:
    """The user's Slurm accounts (their associations) and default account; empty where accounting is not kept."""

    user: str
    accounts: list[str]
    default: Optional[str]
    said: str = ""
    """Why none are known, where ``sacctmgr`` is missing or failed."""


def accounts(user: Optional[str] = None) -> Accounts:
    """The user's associations and default account, from ``sacctmgr``."""
    user = user or getpass.getuser()
    if shutil.which("sacctmgr") is None:
        return Accounts(user, [], None, "no sacctmgr on PATH")
    assoc = slurm("sacctmgr", "--noheader", "--parsable2", "show", "associations", f"user={user}", "format=account")
    if assoc.returncode != 0:
        return Accounts(user, [], None, f"sacctmgr failed: {assoc.stderr.strip()[-200:]}")
    found = sorted({line.strip() for line in assoc.stdout.splitlines() if line.strip()})
    default = slurm("sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=defaultaccount")
    named = default.stdout.strip().splitlines()[0].strip() if default.returncode == 0 and default.stdout.strip() else ""
    return Accounts(user, found, named or None)
