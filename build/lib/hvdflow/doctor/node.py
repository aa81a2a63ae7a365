"""The compute node's checks of ``hvdflow doctor``, run there as one short Slurm job step (``python -m
hvdflow.doctor.node``): the GPUs the job got against the profile's ``gpus_per_node``, the node-local scratch (made
inside the job, writable, its free space against the largest prepared dataset), the udocker directory's filesystem
seen from the node (a file the login node wrote, read back), and the interface the ranks would use.

It prints one line, :data:`MARKER` followed by its :class:`NodeReport` as a JSON object (the node's name and its
findings), which :func:`read_node_report` reads, checked, on the login node.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from hvdflow.config.profile import load_profile
from hvdflow.doctor.findings import Finding, failure, ok, warning
from hvdflow.errors import HvdflowError
from hvdflow.files.heartbeat import size_text
from hvdflow.launch.netaddr import rank_interface, rendezvous_address
from hvdflow_wire import WireError
from hvdflow_wire.values import from_json, parse_object, to_json

MARKER = "hvdflow-doctor-node: "


def gpus(wanted: int) -> Finding:
    """The GPUs Slurm gave the job on this node (``CUDA_VISIBLE_DEVICES``) against ``wanted``, and the driver's
    count where ``nvidia-smi`` is installed."""
    host = socket.gethostname()
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if wanted == 0:
        return ok("node gpus", f"{host}: none asked (gpus_per_node: 0)")
    if len(visible) != wanted:
        return failure("node gpus", f"{host}: Slurm gave {len(visible)} GPUs (CUDA_VISIBLE_DEVICES="
                       f"{','.join(visible) or 'unset'}); the profile counts {wanted} per node",
                       "set gpus_per_node in the profile's hvdflow.yaml to what the partition's nodes have")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return warning("node gpus", f"{host}: Slurm gave {wanted} GPUs ({','.join(visible)}); no nvidia-smi, so the "
                       "driver is not checked", "load the site's CUDA/driver module if the images' TensorFlow finds no GPU")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    seen = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
    if listed.returncode != 0 or len(seen) < wanted:
        return failure("node gpus", f"{host}: Slurm gave {wanted} GPUs but nvidia-smi -L lists {len(seen)} "
                       f"({(listed.stderr or listed.stdout).strip()[-200:]})",
                       "ask the site why the driver does not see the job's GPUs")
    # where Slurm does not constrain devices, nvidia-smi lists the node's GPUs, not only the job's
    return ok("node gpus", f"{host}: {wanted} GPUs from Slurm ({','.join(visible)}), as the profile counts; the "
              f"driver lists {len(seen)}: {seen[0].split(' (UUID')[0]}")


def scratch(scratch_dir: Path, need_bytes: int) -> Finding:
    """Node-local scratch as the job sees it: a private folder made and removed in it, and its free space against
    ``need_bytes`` (the largest prepared dataset; 0: none prepared yet)."""
    host = socket.gethostname()
    try:
        made = Path(tempfile.mkdtemp(prefix=".hvdflow-doctor-", dir=scratch_dir))
        (made / "probe").write_bytes(b"hvdflow")
        shutil.rmtree(made)
    except OSError as exc:
        return failure("node scratch", f"{host}: {scratch_dir} is not writable: {exc.strerror or exc}",
                       "set slurm.scratch_dir in the profile's hvdflow.yaml to node-local storage the job may write "
                       "($TMPDIR where Slurm gives each job its own)")
    free = shutil.disk_usage(scratch_dir).free
    detail = f"{host}: {scratch_dir} writable, {size_text(free)} free"
    if need_bytes and free < need_bytes:
        return failure("node scratch", f"{detail}; the largest prepared dataset needs {size_text(need_bytes)}",
                       "point slurm.scratch_dir at a larger node-local filesystem")
    return ok("node scratch", detail + (f", the largest dataset {size_text(need_bytes)}" if need_bytes else ""))


def shared_directory(probe: Path, expected: str, what: str) -> Finding:
    """Whether this node reads ``probe`` (written by the login node into ``what``'s filesystem) with ``expected``."""
    host = socket.gethostname()
    try:
        seen = probe.read_text()
    except OSError as exc:
        seen = f"unreadable ({exc.strerror or exc})"
    if seen != expected:
        return failure("node sees udocker directory", f"{host} does not see {what} as the login node does: {probe} "
                       f"{seen if seen.startswith('unreadable') else 'holds something else'}",
                       "put udocker_dir on a filesystem every node mounts (the home or project filesystem)")
    return ok("node sees udocker directory", f"{host} reads {what} as the login node does")


def interface(name: str) -> Finding:
    """The interface Gloo would bind on this node, and its address (``auto``: the route to this node's name)."""
    host = socket.gethostname()
    try:
        address = rendezvous_address(name)
        chosen = rank_interface(name, address)
    except HvdflowError as exc:
        return failure("node network", f"{host}: {exc}", "set network_interface in the profile's hvdflow.yaml to the "
                       "nodes' internal network (ip -br addr on a node lists them)")
    return ok("node network", f"{host}: {chosen} ({address}) for network_interface: {name}")


def node_findings(profile_file: Path, probe: Path, expected: str, what: str, need_bytes: int) -> list[Finding]:
    """Every check of this node, for the profile in ``profile_file`` (loaded here: its variables are the job's)."""
    profile = load_profile(profile_file)
    cluster = profile.slurm
    if cluster is None:
        raise HvdflowError(f"{profile_file} has no slurm section: the node checks are for Slurm profiles")
    return [gpus(cluster.gpus_per_node), scratch(cluster.job_scratch_dir(), need_bytes),
            shared_directory(probe, expected, what), interface(cluster.network_interface)]


@dataclass(frozen=True)
class NodeReport:
    """The node's name and its findings: the probe's one line."""

    host: str
    findings: list[Finding]

    def line(self) -> str:
        """The report as the probe prints it: :data:`MARKER` and the JSON object."""
        return MARKER + json.dumps(to_json(self))


def read_node_report(output: str) -> Optional[NodeReport]:
    """The node's report from the job step's output; None if it printed none; WireError naming what is wrong with a
    report line that is not one (not JSON, a key missing or of the wrong type, a status that is none)."""
    for line in output.splitlines():
        if line.startswith(MARKER):
            where = "the node's report line"
            try:
                return from_json(NodeReport, parse_object(line[len(MARKER):], where), where)
            except ValueError as exc:  # Finding's own check of its status
                raise WireError(str(exc) if isinstance(exc, WireError) else f"{where}: {exc}") from None
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the node's checks and print their report line."""
    parser = argparse.ArgumentParser(prog="python -m hvdflow.doctor.node")
    parser.add_argument("--profile-file", type=Path, required=True)
    parser.add_argument("--probe", type=Path, required=True, help="the file the login node wrote")
    parser.add_argument("--expected", required=True, help="what the login node wrote into it")
    parser.add_argument("--what", required=True, help="the directory it stands for")
    parser.add_argument("--need-bytes", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        findings = node_findings(args.profile_file, args.probe, args.expected, args.what, args.need_bytes)
    except HvdflowError as exc:
        findings = [failure("node", f"{socket.gethostname()}: {exc}", "fix the profile as the message says")]
    print(NodeReport(socket.gethostname(), findings).line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
