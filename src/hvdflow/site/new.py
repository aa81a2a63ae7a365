"""``hvdflow site new NAME``: read the cluster from the login node (sinfo, scontrol, sacctmgr) and one probe job on
the training partition's node (:mod:`hvdflow.site.node_probe`), choose each value of the profile (asking where there
is a real choice), and write ``profiles/NAME/`` (Snakemake's ``config.yaml`` and ``hvdflow.yaml``), checked before
it is moved into place: a wrong answer leaves no file behind."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from hvdflow.code_location import with_this_hvdflow
from hvdflow.config.profile import load_profile
from hvdflow.site import choices
from hvdflow.site.ask import Asker
from hvdflow.site.choices import Chosen, SiteError
from hvdflow.site.node_probe import SCRATCH_CANDIDATES, NodeFacts, read_node_facts
from hvdflow.site.render import SiteProfile, config_yaml, hvdflow_yaml
from hvdflow.slurm import cluster_info
from hvdflow.slurm.cluster_info import Partition, slurm_minutes
from hvdflow.slurm.probe_job import probe_name, run_probe_job
from hvdflow_wire import WireError

TRAIN_MINUTES = 240
"""The training jobs' time limit where the partition allows it (hvdflow checkpoints and requeues longer runs)."""
SHORT_MINUTES = 60
"""The other jobs' time limit where the partition allows it."""
NODE_MEMORY_SHARE = 0.9
"""The share of a node's memory a training job asks for (the rest: the node's own)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class SiteRequest:
    """What the user asked for: the profile's name and where it goes, and each value they gave (None: read it from
    the cluster, or ask)."""

    name: str
    profiles: Path
    partition: Optional[str] = None
    cpu_partition: Optional[str] = None
    account: Optional[str] = None
    gpu_type: Optional[str] = None
    gpus_per_node: Optional[int] = None
    scratch: Optional[str] = None
    interface: Optional[str] = None
    registry: Optional[str] = None
    force: bool = False
    wait: float = 600.0


def _minutes(part: Partition, wanted: int) -> Chosen:
    most = slurm_minutes(part.time_limit)
    if most is None or most >= wanted:
        return Chosen(str(wanted), f"minutes; {part.name} allows {part.time_limit}")
    return Chosen(str(int(most)), f"minutes: {part.name}'s limit {part.time_limit} (longer runs checkpoint and requeue)")


@contextmanager
def _login_markers(paths: list[str]) -> Iterator[dict[str, str]]:
    """A file of the login node's in each candidate it can write, so the probe tells node-local from shared."""
    token = f".hvdflow-site-{secrets.token_hex(6)}"
    written: dict[str, str] = {}
    try:
        for path in paths:
            folder = os.path.expandvars(path)
            if "$" in folder:
                continue
            try:
                (Path(folder) / token).write_text("login node")
                written[path] = token
            except OSError:
                pass
        yield written
    finally:
        for path in written:
            Path(os.path.expandvars(path), token).unlink(missing_ok=True)


def probe_node(part: Partition, account: Optional[str], gres: Optional[str], candidates: list[str], wait: float,
               say: Callable[[str], None]) -> NodeFacts:
    """The facts of one node of ``part``, from one probe job; SiteError naming why there are none."""
    options = [f"--partition={part.name}", *([f"--account={account}"] if account else []),
               *([f"--gres={gres}"] if gres else [])]
    nodes = 2 if part.usable_nodes() >= 2 else 1  # two: whether the nodes reach each other on each interface
    with _login_markers(candidates) as markers, tempfile.TemporaryDirectory(prefix=".hvdflow-site-meet-",
                                                                             dir=Path.home()) as meet:
        program = [sys.executable, "-m", "hvdflow.site.node_probe", *(f"--scratch={c}" for c in candidates),
                   *(f"--marker={path}={token}" for path, token in markers.items()),
                   *([f"--meet={meet}"] if nodes == 2 else [])]
        say(f"hvdflow site new: a probe job of {nodes} node{'s' if nodes > 1 else ''} on {part.name} "
            f"({' '.join(options)}), waiting at most {wait:.0f} s")
        outcome = run_probe_job(probe_name("hvdflow-site-"), options, program, with_this_hvdflow(os.environ), wait,
                                lambda line: say(f"hvdflow site new: probe {line}"), nodes=nodes)
    if outcome.output is None:
        reason = f"Slurm's reason: {outcome.waiting.reason}" if outcome.waiting else "it was not in the queue"
        raise SiteError(f"no node of {part.name} took the probe job within {wait:.0f} s ({reason}); it was "
                        "cancelled: run hvdflow site new again with a longer --wait when the partition has a free node")
    stdout, stderr = outcome.output
    try:
        facts = read_node_facts(stdout)
    except WireError as exc:
        raise SiteError(f"the probe job's report: {exc}") from None
    if facts is None:
        raise SiteError(f"the probe job on {part.name} failed (srun exited {outcome.returncode}): "
                        f"{(stderr or stdout).strip()[-400:]}")
    return facts


def _execmode(facts: NodeFacts) -> Chosen:
    if facts.runc_problem is None:
        return Chosen("auto", f"probe job: {facts.host} allows user namespaces and has runc, so auto runs R1")
    return Chosen("auto", f"probe job: {facts.runc_problem}; auto runs P1 there")


def choose(request: SiteRequest, asker: Asker, say: Callable[[str], None]) -> SiteProfile:
    """Every value of the new profile, from the cluster and the user's answers; SiteError naming a wrong one."""
    images = choices.registry(request.registry, os.environ)
    config = cluster_info.controller_config()
    parts = cluster_info.partitions()
    known = cluster_info.accounts()
    about = (f"Slurm {config.get('SLURM_VERSION', '?')}, {config.get('ProctrackType', '?')}, "
             f"{config.get('JobContainerType', '?')}, KillWait {config.get('KillWait', '?')}")
    say(f"hvdflow site new: {config.get('ClusterName', 'the cluster')}: {about}; partitions "
        f"{', '.join(p.name + ('*' if p.default else '') for p in parts)}")
    cpu_only = request.gpus_per_node == 0
    train = choices.train_partition(parts, request.partition, cpu_only, asker)
    kind = Chosen(None, "--gpus-per-node 0") if cpu_only else choices.gpu_type(train, request.gpu_type, asker)
    gpus = choices.gpus_per_node(train, kind.value, request.gpus_per_node)
    account = choices.account(known, request.account, asker)
    prep = choices.preparation_partition(parts, request.cpu_partition, train)
    gres = None if not gpus else (f"gpu:{kind.value}:1" if kind.value else "gpu:1")
    candidates = [request.scratch] if request.scratch else list(SCRATCH_CANDIDATES)
    facts = probe_node(train, account.value, gres, candidates, request.wait, say)
    cpus = max(1, train.cpus_per_node // gpus) if gpus else train.cpus_per_node
    return SiteProfile(
        name=request.name,
        header=f"on {time.strftime('%Y-%m-%d')} from sinfo, scontrol, sacctmgr ({about}) and a probe job on {facts.host}",
        account=account,
        partition=Chosen(prep.name, "--cpu-partition" if request.cpu_partition else
                         ("sinfo: Slurm's default partition" if prep.default else "the training partition")),
        partition_runtime=int(_minutes(prep, SHORT_MINUTES).value or SHORT_MINUTES),
        train_partition=Chosen(train.name, ("--partition" if request.partition else "chosen") + f"; sinfo: "
                               f"{train.nodes} nodes, {train.cpus_per_node} cores, {train.memory_mb} MB"),
        train_runtime=_minutes(train, TRAIN_MINUTES),
        train_mem_mb=Chosen(str(int(train.memory_mb * NODE_MEMORY_SHARE)),
                            f"per node: {int(NODE_MEMORY_SHARE * 100)} % of sinfo's {train.memory_mb} MB"),
        train_cpus_per_task=Chosen(str(cpus), f"per rank: {train.cpus_per_node} cores / {gpus or 1} ranks per node"),
        registry=images,
        execmode=_execmode(facts),
        network_interface=choices.network_interface(facts, request.interface),
        scratch_dir=choices.scratch(facts, request.scratch),
        gpus_per_node=Chosen(str(gpus), "--gpus-per-node" if request.gpus_per_node is not None else
                             f"sinfo: {train.name}'s nodes ({kind.value or 'any type'}); probe job saw "
                             f"{', '.join(facts.gpu_names) or 'no driver'}"),
        gpu_type=kind,
    )


def write_profile(site: SiteProfile, target: Path, force: bool) -> None:
    """Write the profile's two files into ``target``, checked by hvdflow's profile loader before they are moved
    into place (an existing ``target`` is replaced only with ``force``)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide the profile from the user's group
    try:
        (staging / "config.yaml").write_text(config_yaml(site))
        (staging / "hvdflow.yaml").write_text(hvdflow_yaml(site))
        load_profile(staging / "hvdflow.yaml")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def new_site(request: SiteRequest, asker: Asker, say: Callable[[str], None]) -> Path:
    """Read the cluster, choose, write ``profiles/NAME/``; its folder. SiteError where a value does not fit or the
    profile exists (without ``force``): nothing is written then."""
    if not _NAME.match(request.name):
        raise SiteError(f"{request.name!r}: a profile's name is letters, digits, _ . - (it becomes profiles/NAME/)")
    target = request.profiles / request.name
    if target.exists() and not request.force:
        raise SiteError(f"{target} exists: choose another name, or --force to replace it")
    site = choose(request, asker, say)
    request.profiles.mkdir(parents=True, exist_ok=True)
    write_profile(site, target, request.force)
    return target
