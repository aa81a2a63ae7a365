"""The login node's side of ``hvdflow doctor``'s compute-node checks: one short ``srun`` job on the train partition
(:mod:`hvdflow.doctor.node` runs there), watched while it waits in the queue.

While the job waits, a line every :data:`PROGRESS_SECONDS` says so with Slurm's reason (``squeue``'s); past the wait
limit the job is cancelled and the finding says how to run the check later. Whatever ends the wait (the limit, an
exception, Ctrl-C or a stop signal turned into :class:`Stopped`), the job is cancelled before this returns: nothing
is left in the queue.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from hvdflow.code_location import with_this_hvdflow
from hvdflow.doctor import host
from hvdflow.doctor.findings import Finding, failure, ok, warning
from hvdflow.doctor.node import read_node_report
from hvdflow.doctor.profile_files import DoctorProfile
from hvdflow.files.heartbeat import tree_bytes
from hvdflow_wire import WireError

NODE_JOB_MINUTES = 5
DEFAULT_WAIT = 600.0
"""Seconds the doctor waits for its node job (queueing included) by default (``--wait``)."""
PROGRESS_SECONDS = 30.0
"""How often a waiting node job is said to wait, with Slurm's reason."""
JOB_PREFIX = "hvdflow-doctor-"
"""The node job's name begins with this; a random suffix tells one doctor's job from another's."""


class Stopped(BaseException):
    """The doctor was told to stop by a signal (SIGTERM, SIGHUP): raised where it waits, so that its node job is
    cancelled on the way out (as Ctrl-C's KeyboardInterrupt is)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Stopped` while inside (the previous handlers restored after)."""
    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@dataclass(frozen=True)
class QueuedJob:
    """What ``squeue`` says of the node job: its id, state and reason (None where it is no longer queued)."""

    job_id: str
    state: str
    reason: str


def queued(name: str) -> Optional[QueuedJob]:
    """The job named ``name`` as ``squeue`` shows it, or None."""
    proc = subprocess.run(["squeue", "--noheader", f"--name={name}", "--format=%i|%T|%r"], capture_output=True,
                          text=True, timeout=60)
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 2]
    return QueuedJob(*rows[0]) if proc.returncode == 0 and rows else None


def cancel(name: str, srun: subprocess.Popen[str]) -> None:
    """Cancel the job ``name`` and end its ``srun`` (which would otherwise keep asking for it)."""
    subprocess.run(["scancel", f"--name={name}"], capture_output=True, timeout=60)
    if srun.poll() is None:
        srun.terminate()
        try:
            srun.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srun.kill()
            srun.wait()


def _waited(srun: subprocess.Popen[str], name: str, wait: float, say: Callable[[str], None]
            ) -> Optional[tuple[str, str]]:
    """``srun``'s stdout and stderr once it ends; None where it is still waiting after ``wait`` seconds."""
    start = time.monotonic()
    while True:
        left = wait - (time.monotonic() - start)
        if left <= 0:
            return None
        try:
            return srun.communicate(timeout=min(PROGRESS_SECONDS, left))
        except subprocess.TimeoutExpired:
            job = queued(name)
            if job is not None and job.state == "PENDING":
                say(f"hvdflow doctor: node job {job.job_id} still waits in the queue after "
                    f"{time.monotonic() - start:.0f} s (Slurm's reason: {job.reason}); the limit is {wait:.0f} s")


def node_job(profile: DoctorProfile, largest_dataset: int, wait: float = DEFAULT_WAIT,
             say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> list[Finding]:
    """The node's checks, through one ``srun`` job of one task on the train partition with the profile's GPUs; a
    warning naming Slurm's reason where no node took it within ``wait`` seconds."""
    cluster = profile.cluster.slurm
    assert cluster is not None
    name = JOB_PREFIX + secrets.token_hex(4)
    base = host.existing_parent(profile.cluster.udocker_dir)
    with tempfile.NamedTemporaryFile("w", dir=base, prefix=".hvdflow-doctor-", delete=True) as probe:
        expected = f"{socket.gethostname()} {os.getpid()} {time.time()}"
        probe.write(expected)
        probe.flush()
        argv = ["srun", "--nodes=1", "--ntasks=1", f"--job-name={name}", f"--time={NODE_JOB_MINUTES}",
                *([f"--partition={profile.partition}"] if profile.partition else []),
                *([f"--account={profile.account}"] if profile.account else []),
                *([f"--gres=gpu:{cluster.gpus_per_node}"] if cluster.gpus_per_node else []),
                sys.executable, "-m", "hvdflow.doctor.node", "--profile-file", str(profile.cluster.path.resolve()),
                "--probe", probe.name, "--expected", expected, "--what", str(profile.cluster.udocker_dir),
                "--need-bytes", str(largest_dataset)]
        srun = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=with_this_hvdflow(os.environ), stdin=subprocess.DEVNULL)
        job: Optional[QueuedJob] = None
        output: Optional[tuple[str, str]] = None
        try:
            output = _waited(srun, name, wait, say)
            if output is None:
                job = queued(name)
        finally:
            if srun.poll() is None:  # the limit, Ctrl-C, a stop signal: nothing of the doctor's stays queued
                cancel(name, srun)
    if output is None:
        reason = f"Slurm's reason: {job.reason}" if job is not None else "it was not in the queue"
        return [warning("node job", f"no node took the job within {wait:.0f} s ({reason}); it was cancelled",
                        "run hvdflow doctor again when the partition has a free node (sinfo), with a longer --wait, "
                        "or with --no-job for the login node's checks only")]
    return _report(srun.returncode, *output)


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
