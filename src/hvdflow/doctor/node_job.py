"""The login node's side of ``hvdflow doctor``'s compute-node checks: one short ``srun`` job on the train partition
(:mod:`hvdflow.doctor.node` runs there), a probe job (:mod:`hvdflow.slurm.probe_job`: watched while it waits in the
queue, said every 30 s with Slurm's reason, cancelled after the wait limit or on any stop); past the limit the
finding says how to run the check later.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from hvdflow.code_location import with_this_hvdflow
from hvdflow.doctor.findings import Finding, failure, ok, warning
from hvdflow.doctor.node import read_node_report
from hvdflow.doctor.profile_files import DoctorProfile
from hvdflow.files.heartbeat import tree_bytes
from hvdflow.files.private import existing_parent
from hvdflow.slurm.probe_job import probe_name, run_probe_job
from hvdflow_wire import WireError

DEFAULT_WAIT = 600.0
"""Seconds the doctor waits for its node job (queueing included) by default (``--wait``)."""
JOB_PREFIX = "hvdflow-doctor-"
"""The node job's name begins with this; a random suffix tells one doctor's job from another's."""


def node_job(profile: DoctorProfile, largest_dataset: int, wait: float = DEFAULT_WAIT,
             say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> list[Finding]:
    """The node's checks, through one ``srun`` job of one task on the train partition with the profile's GPUs; a
    warning naming Slurm's reason where no node took it within ``wait`` seconds."""
    cluster = profile.cluster.slurm
    assert cluster is not None
    base = existing_parent(profile.cluster.runtime.udocker_dir)
    with tempfile.NamedTemporaryFile("w", dir=base, prefix=".hvdflow-doctor-", delete=True) as probe:
        expected = f"{socket.gethostname()} {os.getpid()} {time.time()}"
        probe.write(expected)
        probe.flush()
        options = [*([f"--partition={profile.partition}"] if profile.partition else []),
                   *([f"--account={profile.account}"] if profile.account else []),
                   *([f"--gres={cluster.gpu_gres(cluster.gpus_per_node)}"] if cluster.gpus_per_node else [])]
        program = [sys.executable, "-m", "hvdflow.doctor.node", "--profile-file", str(profile.cluster.path.resolve()),
                   "--probe", probe.name, "--expected", expected, "--what", str(profile.cluster.runtime.udocker_dir),
                   "--need-bytes", str(largest_dataset)]
        outcome = run_probe_job(probe_name(JOB_PREFIX), options, program, with_this_hvdflow(os.environ), wait,
                                lambda line: say(f"hvdflow doctor: node {line}"))
    if outcome.output is None:
        job = outcome.waiting
        reason = f"Slurm's reason: {job.reason}" if job is not None else "it was not in the queue"
        return [warning("node job", f"no node took the job within {wait:.0f} s ({reason}); it was cancelled",
                        "run hvdflow doctor again when the partition has a free node (sinfo), with a longer --wait, "
                        "or with --no-job for the login node's checks only")]
    return _report(outcome.returncode, *outcome.output)


def _report(returncode: int, stdout: str, stderr: str) -> list[Finding]:
    """The node's findings from the job step's output, or the failure that names why there are none."""
    try:
        report = read_node_report(stdout)
    except WireError as exc:
        return [failure("node job", str(exc), "run the same hvdflow on the login and compute nodes (the shared "
                        "directory's venv), or report this as a bug")]
    if report is None:
        return [failure("node job", f"srun exited {returncode}: {(stderr or stdout).strip()[-400:]}",
                        "fix what Slurm says above (the partition, account or GRES the profile asks for)")]
    return [ok("node job", f"ran on {report.host}"), *report.findings]


def largest_dataset_bytes(workdir: Path) -> int:
    """The bytes of the largest prepared dataset (``resources/datasets/<name>/``), what staging copies to a node."""
    sizes = [tree_bytes(folder) for folder in (workdir / "resources" / "datasets").glob("*") if folder.is_dir()]
    return max(sizes, default=0)
