"""Start Horovod ranks as ``udocker run`` processes and supervise them.

Two launch models share one supervisor, and either runtime (udocker or native, :mod:`hvdflow.runtime`):
- Gloo: hvdflow starts Horovod's rendezvous server (from the runtime) and waits until it accepts connections, then
  one process per rank with the Horovod variables of :mod:`hvdflow.rank_env`. No MPI, ssh or horovodrun.
- MPI: the host's ``mpirun`` starts one ``udocker run --hostenv`` per rank; the container's Open MPI must match.
Every process runs in its own session, so a failure stops whole process groups, and each rank writes its own log.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .errors import LaunchError
from .rank_env import RankPlacement, horovod_gloo_env
from .runtime import Runtime

RENDEZVOUS_TIMEOUT = 300.0
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
    """SIGTERM each live process group, then SIGKILL what is left after a grace period."""
    live = [p for p in processes if p.proc.poll() is None]
    for p in live:
        _signal_group(p.proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    for p in live:
        try:
            p.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p.proc, signal.SIGKILL)
            p.proc.wait()


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


def wait_for_rendezvous(server: Supervised, port_file: Path, timeout: float) -> int:
    """The port of a rendezvous server once it accepts TCP connections; LaunchError if it dies or never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise LaunchError(f"the rendezvous server exited with code {server.proc.returncode} before serving. "
                              f"Log: {server.log}\n{log_tail(server.log)}")
        if port_file.exists() and port_file.read_text().strip():
            port = int(port_file.read_text())
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    return port
            except OSError:
                pass
        time.sleep(0.2)
    raise LaunchError(f"the rendezvous server did not accept connections within {timeout:.0f} s. Log: {server.log}")


def launch_gloo_local(
    runtime: Runtime,
    placements: Sequence[RankPlacement],
    command: Sequence[str],
    logs: Path,
    paths: Sequence[Path],
    timeout: float,
    iface: str = "lo",
) -> None:
    """Run ``command`` as Horovod ranks on this host over Gloo, one process each, supervised.

    ``paths`` are the host paths the ranks read and write (bound into containers); the logs and the rendezvous
    server's port file go to ``logs``.
    """
    logs.mkdir(parents=True, exist_ok=True)
    port_file = logs / "rendezvous.port"
    port_file.unlink(missing_ok=True)
    binds = [logs, *paths]
    server_argv = runtime.command(["python3", "-m", "hvdflow_trainer.rendezvous", "--port-file", str(port_file)], {}, binds)
    server = start("rendezvous server", server_argv, logs / "rendezvous.log", runtime.process_env())
    ranks: list[Supervised] = []
    try:
        port = wait_for_rendezvous(server, port_file, RENDEZVOUS_TIMEOUT)
        for placement in placements:
            argv = runtime.command(command, horovod_gloo_env(placement, "127.0.0.1", port, iface), binds)
            ranks.append(start(f"rank {placement.rank}", argv, logs / f"rank-{placement.rank}.log", runtime.process_env()))
        supervise(ranks, timeout)
    finally:
        stop(ranks + [server])


def launch_mpi_local(
    runtime: Runtime,
    nranks: int,
    command: Sequence[str],
    logs: Path,
    paths: Sequence[Path],
    timeout: float,
    mpirun: str = "mpirun",
) -> None:
    """Run ``command`` as ``nranks`` Horovod ranks started by the host's ``mpirun``, one process each.

    In udocker, ``--hostenv`` hands Open MPI's variables to the container and ``/tmp`` is bound so the ranks reach
    the host's PMIx server. Each rank's output goes to ``logs/rank-N.log``.
    """
    logs.mkdir(parents=True, exist_ok=True)
    env = {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi"}
    inner = runtime.command(command, env, [logs, *paths], hostenv=True)
    per_rank_log = 'exec "$@" > "$0-$OMPI_COMM_WORLD_RANK.log" 2>&1'
    argv = [mpirun, "-np", str(nranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,tcp",
            "sh", "-c", per_rank_log, str(logs / "rank"), *inner]
    supervise_mpirun(start("mpirun", argv, logs / "mpirun.log", runtime.process_env()), logs, timeout)


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
