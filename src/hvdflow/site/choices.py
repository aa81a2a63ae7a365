"""What ``hvdflow site new`` writes into a profile, chosen from what the cluster said, each value with where it came
from: the train and preparation partitions, the GPU type and count, the account, the node-local scratch and the
ranks' network interface. A flag's value is checked against the cluster and refused by name when it is wrong; a
real choice left open is asked (:class:`~hvdflow.site.ask.Asker`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from hvdflow.errors import HvdflowError
from hvdflow.images.offline import NO_REGISTRY
from hvdflow.site.ask import Asker, Option
from hvdflow.site.node_probe import Interface, NodeFacts
from hvdflow.slurm.cluster_info import Accounts, Partition

FAST_INTERFACES = ("ib", "hsn", "opa", "bond")
"""Name prefixes of the high-speed interfaces (InfiniBand, Slingshot, Omni-Path, bonded links), taken before any
other for the ranks' Gloo traffic."""


class SiteError(HvdflowError):
    """A value given to ``hvdflow site new`` does not fit the cluster, or the cluster offers none: the message names
    it and what the cluster has."""


@dataclass(frozen=True)
class Chosen:
    """A value for the profile and where it came from (the comment written beside it)."""

    value: Optional[str]
    said: str


REGISTRY_VARIABLE = "${HVDFLOW_REGISTRY}"
"""The profile's registry where the user's environment names it: read each time the profile runs."""


def registry(given: Optional[str], environ: Mapping[str, str]) -> Chosen:
    """Where the profile's images come from: ``--registry`` (a URL, or ``none``: images built or loaded from an
    archive), else ``$HVDFLOW_REGISTRY`` as set now; SiteError where neither is (the profile would fail its first
    check, and the README's image step needs one of them)."""
    if given == NO_REGISTRY:
        return Chosen(NO_REGISTRY, "--registry none: images built or loaded from an archive (hvdflow image load)")
    if given:
        return Chosen(given, "--registry; the login node reaches it (pulls run there)")
    if environ.get("HVDFLOW_REGISTRY"):
        return Chosen(REGISTRY_VARIABLE, f"$HVDFLOW_REGISTRY, now {environ['HVDFLOW_REGISTRY']}: read each run; "
                      "the login node reaches it")
    raise SiteError("the images' registry: no --registry given and $HVDFLOW_REGISTRY is not set: give --registry "
                    "URL (where your site serves hvdflow's images; or export HVDFLOW_REGISTRY=URL) or --registry none "
                    "(images built or loaded from an archive: hvdflow image load)")


def _describe(part: Partition) -> str:
    return f"{part.available}, {part.nodes} nodes, {part.gres_text()}, limit {part.time_limit}"


def _named(parts: list[Partition], name: str, flag: str) -> Partition:
    for part in parts:
        if part.name == name:
            return part
    raise SiteError(f"{flag} {name}: no such partition; sinfo lists {', '.join(p.name for p in parts) or 'none'}")


def train_partition(parts: list[Partition], name: Optional[str], cpu_only: bool, asker: Asker) -> Partition:
    """The partition the training jobs run in: ``name`` (checked: up, with GPUs unless ``cpu_only``), else the one
    the user picks among those with GPUs (default: Slurm's default partition where it has GPUs, else the one with
    the most GPU nodes)."""
    if name is not None:
        part = _named(parts, name, "--partition")
        if part.available != "up":
            raise SiteError(f"--partition {name}: the partition is {part.available}; choose one that is up (sinfo -s)")
        if not cpu_only and not part.gpu_types():
            with_gpus = [p.name for p in parts if p.gpu_types()]
            raise SiteError(f"--partition {name}: its nodes have no GPUs (no gpu GRES); partitions with GPUs: "
                            f"{', '.join(with_gpus) or 'none'} (or --gpus-per-node 0 to train on CPUs)")
        return part
    up = [p for p in parts if p.available == "up"]
    candidates = up if cpu_only else [p for p in up if p.gpu_types()]
    if not candidates:
        raise SiteError("no partition that is up has GPUs (sinfo lists: " +
                        "; ".join(f"{p.name}: {_describe(p)}" for p in parts) + "); pass --gpus-per-node 0 to "
                        "train on CPUs, with --partition")
    default = next((p for p in candidates if p.default), max(candidates, key=lambda p: (
        sum(n for _, n in p.gpu_types().values()), p.nodes)))
    chosen = asker.choose("the training partition", [Option(p.name, _describe(p)) for p in candidates],
                          default.name, "--partition")
    return _named(parts, chosen, "--partition")


def gpu_type(part: Partition, name: Optional[str], asker: Asker) -> Chosen:
    """The GRES type the jobs ask for: ``name`` (checked against the partition's), else the user's pick where the
    partition's nodes have more than one type (default: any type)."""
    kinds = part.gpu_types()
    typed = sorted(k for k in kinds if k)
    if name is not None:
        if name not in typed:
            raise SiteError(f"--gpu-type {name}: no node of {part.name} has it; its GPUs: {_describe(part)}")
        most, nodes = kinds[name]
        return Chosen(name, f"--gpu-type; sinfo: {most} per node on {nodes} of {part.name}'s nodes")
    if len(typed) < 2:
        return Chosen(None, f"sinfo: {part.name}'s nodes have one GPU type at most")
    options = [Option("any", f"any type, up to {part.gpus_per_node()} per node")]
    options += [Option(k, f"{kinds[k][0]} per node on {kinds[k][1]} nodes") for k in typed]
    chosen = asker.choose(f"the GPU type in {part.name}", options, "any", "--gpu-type")
    return Chosen(None if chosen == "any" else chosen, f"sinfo: {part.name} has {', '.join(typed)}; chosen")


def gpus_per_node(part: Partition, kind: Optional[str], given: Optional[int]) -> int:
    """GPUs per node: ``given`` (checked against the nodes), else the most of ``kind`` one of the nodes has."""
    most = part.gpus_per_node(kind)
    if given is not None:
        if given > most:
            raise SiteError(f"--gpus-per-node {given}: {part.name}'s nodes have at most {most}"
                            f"{' ' + kind if kind else ''} GPUs ({_describe(part)})")
        return given
    return most


def account(known: Accounts, name: Optional[str], asker: Asker) -> Chosen:
    """The account the jobs are charged to: ``name`` (checked against the user's associations where sacctmgr lists
    them), else the user's pick among their accounts (default: their default account)."""
    if name is not None:
        if known.accounts and name not in known.accounts:
            raise SiteError(f"--account {name}: not one of {known.user}'s accounts ({', '.join(known.accounts)})")
        return Chosen(name, "--account" + ("" if known.accounts else f" (sacctmgr: {known.said or 'none listed'})"))
    if not known.accounts:
        return Chosen(None, f"sacctmgr lists no account of {known.user} ({known.said or 'none'}): Slurm's default")
    default = known.default if known.default in known.accounts else known.accounts[0]
    options = [Option(a, "the default account" if a == known.default else "an account of yours") for a in known.accounts]
    chosen = asker.choose("the account", options, default, "--account")
    return Chosen(chosen, f"sacctmgr: {known.user}'s accounts {', '.join(known.accounts)} (default {known.default})")


def preparation_partition(parts: list[Partition], name: Optional[str], train: Partition) -> Partition:
    """Where preparation, evaluation and the other short jobs run: ``name``, else Slurm's default partition where it
    is up, else the training partition."""
    if name is not None:
        return _named(parts, name, "--cpu-partition")
    return next((p for p in parts if p.default and p.available == "up"), train)


def scratch(facts: NodeFacts, given: Optional[str]) -> Chosen:
    """Node-local scratch: ``given`` (checked on the node: writable, and not the login node's), else the first
    candidate the node could write that is not shared with the login node."""
    listed = "; ".join(f"{c.path}: {c.said}" for c in facts.scratch)
    for candidate in facts.scratch:
        if given is not None and candidate.path != given:
            continue
        if candidate.writable and candidate.node_local is not False:
            local = "node-local" if candidate.node_local else "not visible from the login node to compare"
            return Chosen(candidate.path, f"probe job on {facts.host}: writable, {local}, "
                          f"{candidate.free_bytes / 2**30:.1f} GiB free")
        if given is not None:
            raise SiteError(f"--scratch {given}: on {facts.host} {candidate.said}")
    raise SiteError(f"no node-local scratch found on {facts.host} ({listed}): pass --scratch DIR, the node-local "
                    "directory the site's documentation names")


def _rank(interface: Interface) -> tuple[int, int]:
    fast = any(interface.name.startswith(prefix) for prefix in FAST_INTERFACES)
    return (0 if fast else 1, -(interface.speed_mbps or 0))


def network_interface(facts: NodeFacts, given: Optional[str]) -> Chosen:
    """The interface the ranks' Gloo binds to: ``given`` (checked on the node), else the high-speed one (ib*,
    hsn*, ...), else the fastest, else ``auto`` where the node has none but loopback; where a second node tried to
    reach this one on each interface (``facts.peer``), only those it reached."""
    names = ", ".join(f"{i.name} {i.address}" + (f" {i.speed_mbps} Mb/s" if i.speed_mbps else "") for i in facts.interfaces)
    pool = facts.interfaces
    said = f"probe job on {facts.host}: {names}"
    if facts.peer is not None:
        pool = [i for i in facts.interfaces if i.name in facts.reached]
        said = f"probe job: {facts.peer} reached {facts.host} on {', '.join(facts.reached) or 'none'} of {names}"
    if given is not None:
        if given != "auto" and given not in {i.name for i in facts.interfaces}:
            raise SiteError(f"--interface {given}: {facts.host} has no such interface with an address ({names or 'none'})")
        if given != "auto" and given not in {i.name for i in pool}:
            raise SiteError(f"--interface {given}: {facts.peer} could not reach {facts.host} on it ({said})")
        return Chosen(given, f"--interface; {said}")
    if facts.peer is not None and not pool:
        raise SiteError(f"no interface of {facts.host} was reached from {facts.peer} ({names}): ask the site which "
                        "network the compute nodes share, and pass --interface NAME")
    if not pool:
        return Chosen("auto", f"probe job on {facts.host}: no interface but loopback listed; auto follows the route")
    return Chosen(sorted(pool, key=_rank)[0].name, said)
