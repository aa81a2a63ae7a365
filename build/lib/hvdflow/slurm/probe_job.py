"""A short probe job run from the login node with ``srun`` and watched while it waits in the queue: ``hvdflow
doctor``'s compute-node checks and ``hvdflow site new``'s look at a partition's node.

While the job waits, a line every :data:`PROGRESS_SECONDS` says so with Slurm's reason (``squeue``'s); past the wait
limit the job is cancelled. Whatever ends the wait (the limit, an exception, Ctrl-C or a stop signal turned into
:class:`Stopped`), the job is cancelled before :func:`run_probe_job` returns: nothing is left in the queue.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

PROBE_MINUTES = 5
"""The probe job's time limit."""
PROGRESS_SECONDS = 30.0
"""How often a waiting probe job is said to wait, with Slurm's reason."""


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
                say(f"job {job.job_id} still waits in the queue after "
                    f"{time.monotonic() - start:.0f} s (Slurm's reason: {job.reason}); the limit is {wait:.0f} s")


@dataclass(frozen=True)
class ProbeOutcome:
    """How a probe job ended: its exit status and output, or (``output`` None) that no node took it in time, with
    what ``squeue`` said of it then."""

    returncode: int
    output: Optional[tuple[str, str]]
    waiting: Optional[QueuedJob]


def probe_name(prefix: str) -> str:
    """A job name of ``prefix`` and a random suffix, that tells one probe's job from another's."""
    return prefix + secrets.token_hex(4)


def run_probe_job(name: str, options: Sequence[str], program: Sequence[str], env: dict[str, str], wait: float,
                  say: Callable[[str], None], nodes: int = 1) -> ProbeOutcome:
    """``srun --nodes=N --ntasks=N --ntasks-per-node=1 --job-name=NAME --time=`` :data:`PROBE_MINUTES` ``OPTIONS
    PROGRAM``, waited for at most ``wait`` seconds (queueing included) and cancelled on the way out whatever ended
    the wait."""
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", f"--job-name={name}",
            f"--time={PROBE_MINUTES}", *options, *program]
    srun = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    job: Optional[QueuedJob] = None
    output: Optional[tuple[str, str]] = None
    try:
        output = _waited(srun, name, wait, say)
        if output is None:
            job = queued(name)
    finally:
        if srun.poll() is None:  # the limit, Ctrl-C, a stop signal: nothing of ours stays queued
            cancel(name, srun)
    return ProbeOutcome(srun.returncode if output is not None else -1, output, job)
