"""What ``hvdflow site new`` learns on one compute node of a partition, run there as a short Slurm job step
(``python -m hvdflow.site.node_probe``): the node-local scratch candidates (writable, node-local, free space), the
network interfaces with their addresses and speeds (and, in a probe of two nodes, which of them the second node
reaches), whether this user may run udocker's R1 there (user namespaces and runc: what ``execmode: auto`` chooses),
and the GPUs the job got.

It prints one line, :data:`MARKER` and its :class:`NodeFacts` as a JSON object, which :func:`read_node_facts` reads
on the login node.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from hvdflow.images.runc_probe import probe_runc_mode
from hvdflow.site.reach import reach
from hvdflow_wire.values import from_json, parse_object, to_json

MARKER = "hvdflow-site-node: "
SCRATCH_CANDIDATES = ("$TMPDIR", "/local", "/scratch/local", "/localscratch", "/lscratch", "/tmp")
"""Where sites put node-local scratch, in the order preferred: a per-job ``$TMPDIR`` first (job_container/tmpfs or a
prolog's), /tmp last (often small, or shared with the login node in containers)."""


@dataclass(frozen=True)
class ScratchCandidate:
    """One scratch candidate as the node sees it: ``path`` as the profile would write it, ``resolved`` as the job
    expands it; whether a private folder could be made in it; its free bytes; ``node_local`` False where the login
    node's marker file shows through (the same filesystem), None where the login node could not write one."""

    path: str
    resolved: str
    writable: bool
    free_bytes: int
    node_local: Optional[bool]
    said: str


@dataclass(frozen=True)
class Interface:
    """A network interface of the node with an IPv4 address: name, address, speed in Mb/s (None where the kernel
    does not say: virtual links)."""

    name: str
    address: str
    speed_mbps: Optional[int]


@dataclass(frozen=True)
class NodeFacts:
    """The probe's line: the node's name and what it found."""

    host: str
    scratch: list[ScratchCandidate]
    interfaces: list[Interface]
    runc_problem: Optional[str]
    """Why udocker's R1 cannot run here (user namespaces, runc); None where it can."""
    visible_gpus: list[str]
    gpu_names: list[str]
    """The GPUs ``nvidia-smi -L`` lists; empty without a driver."""
    peer: Optional[str] = None
    """The second node that tried to reach this one on each interface; None where none did (a one-node probe)."""
    reached: list[str] = field(default_factory=list)
    """The interfaces the second node reached."""

    def line(self) -> str:
        """The facts as the probe prints them: :data:`MARKER` and the JSON object."""
        return MARKER + json.dumps(to_json(self))


def _scratch(path: str, marker: str) -> ScratchCandidate:
    resolved = os.path.expandvars(path)
    if "$" in resolved:
        return ScratchCandidate(path, resolved, False, 0, None, "the job does not set it")
    folder = Path(resolved)
    if not folder.is_dir():
        return ScratchCandidate(path, resolved, False, 0, None, "no such directory")
    try:
        made = Path(tempfile.mkdtemp(prefix=".hvdflow-site-", dir=folder))
        (made / "probe").write_bytes(b"hvdflow")
        shutil.rmtree(made)
    except OSError as exc:
        return ScratchCandidate(path, resolved, False, 0, None, f"not writable: {exc.strerror or exc}")
    seen = (folder / marker).exists() if marker else False
    node_local: Optional[bool] = None if not marker else not seen
    said = "the login node's file shows through: shared, not node-local" if seen else "writable"
    return ScratchCandidate(path, resolved, True, shutil.disk_usage(folder).free, node_local, said)


def scratch_candidates(paths: Sequence[str], markers: dict[str, str]) -> list[ScratchCandidate]:
    """Each candidate checked (``markers``: the file the login node wrote in a candidate, by path)."""
    return [_scratch(path, markers.get(path, "")) for path in paths]


def _speed(name: str) -> Optional[int]:
    try:
        speed = int(Path(f"/sys/class/net/{name}/speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return speed if speed > 0 else None


def interfaces() -> list[Interface]:
    """The node's interfaces with an IPv4 address, loopback left out (``ip -o -4 addr``)."""
    proc = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=30)
    found = []
    for line in proc.stdout.splitlines():
        fields = line.split()
        if "inet" not in fields or len(fields) < 4:
            continue
        name = fields[1].split("@")[0]
        address = fields[fields.index("inet") + 1].split("/")[0]
        if name != "lo" and not address.startswith("127."):
            found.append(Interface(name, address, _speed(name)))
    return found


def _gpu_names() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    return [line.split(" (UUID")[0] for line in listed.stdout.splitlines() if line.startswith("GPU ")]


def node_facts(paths: Sequence[str], markers: dict[str, str], meet: Optional[Path] = None) -> Optional[NodeFacts]:
    """Everything the probe looks at on this node, where it is the probe's first task; its part of the meeting with a
    second node (:mod:`hvdflow.site.reach`, in ``meet``) in either task; None in the second."""
    found = interfaces()
    met = reach(meet, int(os.environ.get("SLURM_PROCID", "0")), {i.name: i.address for i in found})
    if meet is not None and met is None:
        return None
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return NodeFacts(socket.gethostname(), scratch_candidates(paths, markers), found, probe_runc_mode().cause(),
                     visible, _gpu_names(), met.peer if met else None, met.reached if met else [])


def read_node_facts(output: str) -> Optional[NodeFacts]:
    """The node's facts from the job step's output; None if it printed none; WireError naming a malformed line."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            return from_json(NodeFacts, parse_object(line[len(MARKER):], "the node probe's line"),
                             "the node probe's line")
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Probe this node and print the facts' line."""
    parser = argparse.ArgumentParser(prog="python -m hvdflow.site.node_probe")
    parser.add_argument("--scratch", action="append", default=[], help="a candidate (repeat; in order)")
    parser.add_argument("--marker", action="append", default=[], metavar="PATH=FILE",
                        help="the file the login node wrote in candidate PATH")
    parser.add_argument("--meet", type=Path, default=None,
                        help="a folder on the shared home where the probe's two tasks meet (two-node probes)")
    args = parser.parse_args(argv)
    markers = dict(item.split("=", 1) for item in args.marker)
    facts = node_facts(args.scratch, markers, args.meet)
    if facts is not None:
        print(facts.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
