"""Start processes in their own sessions, wait for them, and stop whole process groups on the first failure.

Every launcher (local, Slurm) and every single pipeline step goes through here, so a failed or timed-out process
never leaves its children running, and every error names the process and the tail of its log.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from hvdflow.errors import LaunchError
from hvdflow.launch.runtime import Runtime

STEP_TIMEOUT = float(os.environ.get("HVDFLOW_STEP_TIMEOUT", "7200"))
"""How long one pipeline step (or a node's wait for staging) may run, in seconds."""
STOP_GRACE = 10.0


@dataclass
class Supervised:
    """A started process: what it is, its log, and the Popen."""

    label: str
    log: Path
    proc: subprocess.Popen[bytes]


def start(label: str, argv: Sequence[str], log: Path, env: Mapping[str, str]) -> Supervised:
    """Start ``argv`` in a new session with its output in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        out.write(f"$ {shlex.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(env), start_new_session=True)
    return Supervised(label, log, proc)


def stop(processes: Sequence[Supervised]) -> None:
    """SIGTERM every process group that still has members, then SIGKILL what is left after a grace period.

    Whole groups, not just the processes started: Debian's proot ignores SIGTERM and outlives the ``udocker run``
    that started it, so a group whose leader has exited may still hold a live rank or rendezvous server.
    """
    for p in processes:
        if group_members(p.proc.pid):
            _signal_group(p.proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(_reap_and_check(p) for p in processes):
        time.sleep(0.1)
    for p in processes:
        if _reap_and_check(p):
            _signal_group(p.proc, signal.SIGKILL)
    for p in processes:
        p.proc.wait()


def _reap_and_check(p: Supervised) -> bool:
    """Whether ``p``'s group still has live members, after reaping ``p`` itself if it has exited."""
    p.proc.poll()
    return bool(group_members(p.proc.pid))


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def supervise(processes: Sequence[Supervised], timeout: float) -> None:
    """Wait for all processes to exit 0; on the first failure or the timeout stop the others and raise LaunchError."""
    deadline = time.monotonic() + timeout
    pending = list(processes)
    try:
        while pending:
            for p in list(pending):
                code = p.proc.poll()
                if code is None:
                    continue
                if code != 0:
                    raise LaunchError(f"{p.label} failed with exit code {code}; the other processes were stopped. "
                                      f"Log: {p.log}\n{log_tail(p.log)}")
                pending.remove(p)
            if pending and time.monotonic() > deadline:
                names = ", ".join(p.label for p in pending)
                raise LaunchError(f"{names} still running after {timeout:.0f} s; stopped. Logs: "
                                  + ", ".join(str(p.log) for p in pending))
            time.sleep(0.2)
    finally:
        stop(processes)


def supervise_mpirun(launcher: Supervised, logs: Path, timeout: float) -> None:
    """Wait for ``mpirun``; on failure, LaunchError naming the rank mpirun reports and that rank's log in ``logs``."""
    try:
        supervise([launcher], timeout)
    except LaunchError as exc:
        failed = mpirun_failed_rank(launcher.log)
        if failed is None:
            raise
        rank, code = failed
        log = logs / f"rank-{rank}.log"
        raise LaunchError(f"rank {rank} failed with exit code {code} (reported by mpirun); the job was stopped. "
                          f"Log: {log}\n{log_tail(log, 8)}\nmpirun: {exc}") from None


_MPIRUN_FAILED = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)")


def mpirun_failed_rank(mpirun_log: Path) -> tuple[int, int] | None:
    """The rank and exit code of the first failed process, as Open MPI's mpirun reports it in its output."""
    try:
        match = _MPIRUN_FAILED.search(mpirun_log.read_text(errors="replace"))
    except OSError:
        return None
    return (int(match.group(1)), int(match.group(2))) if match else None


def run_one(runtime: Runtime, command: Sequence[str], paths: Sequence[Path], log: Path, timeout: float, what: str) -> None:
    """Run one non-distributed step (preparation, evaluation) in the runtime; LaunchError naming ``what`` and the log."""
    process = start(what, runtime.command(command, {}, paths), log, runtime.process_env())
    supervise([process], timeout)
