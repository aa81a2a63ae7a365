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
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from hvdflow.errors import LaunchError, RunStopped
from hvdflow.runtime import Runtime
from hvdflow_runstate import STOPPED_EXIT
from hvdflow_wire.user_code import user_code_error

STOP_GRACE = 10.0
KILL_REAP_WAIT = 10.0
STOPPING_WAIT = 120.0
"""How long the other processes may take to exit after one exited with STOPPED_EXIT (they stop together)."""
INTERRUPT_RESEND = 2.0
"""Seconds between repeats of a Ctrl-C to ranks still running: a rank that got it before its trainer installed its
handlers ignored it (its launcher's disposition), and the trainer's handler only sets a flag, so a repeat is harmless."""


@dataclass
class Supervised:
    """A started process: what it is, its log, and the Popen."""

    label: str
    log: Path
    proc: subprocess.Popen[bytes]
    rank: bool = False
    """A training rank: it checkpoints and stops on :data:`STOP_SIGNALS` (the processes above it ignore them)."""
    interrupts_before: int = 0
    """How many stop signals this process had got before it started: a later one, even before :func:`supervise`
    runs, is passed on."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
"""The signals that ask a training run to checkpoint and stop (the trainer catches them)."""


def ignore_stop_signals() -> None:
    """In a child before exec: ignore :data:`STOP_SIGNALS` (an ignored disposition survives exec).

    For the processes between a launcher and a rank: ``udocker run`` is a Python process that waits for proot, and
    SIGUSR1's or SIGTERM's default action would kill it while the trainer below it saves its checkpoint; the rank
    would then look dead. The trainer installs its own handlers, so it still gets every signal.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class _StopRequests:
    """The stop requests this process got, for :func:`supervise` in whatever thread: the signals counted by
    :func:`watch_stop_signals` in the main thread, the one the ranks get for the latest, and the parent to watch."""

    count = 0
    relayed: signal.Signals = signal.SIGINT
    parent: Optional[int] = None
    """The parent of a job Snakemake spawned (its shell): when it is gone, Snakemake has given the job up."""
    snakemake: Optional[int] = None
    """The Snakemake that spawned the job, the parent of that shell: when the shell is no longer its child (it was
    killed on its own, SIGKILL or the kernel's OOM killer), Snakemake has gone too."""


RELAYED = {signal.SIGINT: signal.SIGINT, signal.SIGHUP: signal.SIGTERM}
"""What each watched signal becomes for the ranks: Ctrl-C stays SIGINT; a hang-up (the terminal or the ssh session
closed) is SIGTERM, which the trainer takes as a request to checkpoint and stop (it would die of SIGHUP)."""


def watch_stop_signals(spawned_job: bool) -> None:
    """Count Ctrl-C (SIGINT) and hang-ups (SIGHUP) for :func:`supervise`, then let the handler that was there act as
    before; in a job Snakemake spawned (``spawned_job``), watch its parent too.

    Snakemake runs a rule body in a worker thread, where Python delivers no signal, and after a Ctrl-C it waits for
    the body to end; the ranks run in sessions of their own, out of the terminal's reach. So without this a Ctrl-C
    would wait for the whole training, and a hang-up would kill Snakemake and leave the ranks and the rendezvous
    server running. Called in the main thread (the rules call it while Snakemake parses them), the handlers let
    :func:`supervise`, in whatever thread, pass each signal on to the ranks (:data:`RELAYED`), which checkpoint and
    stop. A signal whose default action was to end the process still ends it, after the rule bodies have stopped:
    KeyboardInterrupt for SIGINT, ``SystemExit(128 + N)`` for SIGHUP, both of which Snakemake's scheduler takes as
    the user's request to end. A signal that is ignored (a job started in the background, ``nohup``) stays ignored.

    SIGTERM is Snakemake's own: its scheduler finishes the running jobs first. Sent to Snakemake's whole process
    group (``kill -TERM -PGID``, ``timeout``), it also ends the shell between Snakemake and each job it spawned for a
    rule with a ``run:`` body, and Snakemake then reports the job failed and exits while the job's process, whose
    handler is Snakemake's too, would train on and write its outputs unwatched. A Snakemake killed on its own
    (SIGKILL, the OOM killer) leaves that shell waiting for the job, adopted by another process. So such a job notes
    its parent, and the shell's parent where its parent is a shell (not this Python), and :func:`supervise` stops
    its ranks (SIGTERM: checkpoint and stop) when either is gone. (A Snakemake that is itself adopted, its terminal
    closed under ``nohup``, still watches its jobs: its own parent is not watched.)
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if spawned_job:
        _StopRequests.parent = os.getppid()
        if not _runs_this_python(_StopRequests.parent):
            _StopRequests.snakemake = parent_of(_StopRequests.parent)
    for signum in RELAYED:
        _count_signal(signum)


def _count_signal(signum: signal.Signals) -> None:
    """Count ``signum`` in :class:`_StopRequests`, then act as the handler that was there did."""
    previous = signal.getsignal(signum)
    if previous in (signal.SIG_IGN, None) or getattr(previous, "hvdflow_watch", False):
        return

    def on_signal(number: int, frame: object) -> None:
        _StopRequests.count += 1
        _StopRequests.relayed = RELAYED[signal.Signals(number)]
        if callable(previous):
            previous(number, frame)
        elif number == signal.SIGINT:  # SIG_DFL: end as the default action would, with Python's exception
            raise KeyboardInterrupt
        else:
            raise SystemExit(128 + number)

    on_signal.hvdflow_watch = True  # type: ignore[attr-defined]
    signal.signal(signum, on_signal)


def _runs_this_python(pid: int) -> bool:
    """Whether process ``pid`` runs the interpreter this process runs (Snakemake, not a shell between)."""
    try:
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(sys.executable)
    except OSError:
        return False


def _abandoned() -> bool:
    """Whether the Snakemake that spawned this job has gone (:func:`watch_stop_signals` noted whom to watch)."""
    parent = _StopRequests.parent
    if parent is None:
        return False
    return os.getppid() != parent or (_StopRequests.snakemake is not None
                                      and parent_of(parent) != _StopRequests.snakemake)


ABANDONED = ("the Snakemake that started this job had gone (killed, or a signal to its process group ended the shell "
             "between them)")


class StopRelay:
    """When to pass a stop on to the ranks, and which signal: at each new one counted by :func:`watch_stop_signals`
    since ``seen``, or when the job has been abandoned (its parent, noted by :func:`watch_stop_signals`, is gone);
    then again every :data:`INTERRUPT_RESEND` seconds (until the caller stops asking: its ranks have exited)."""

    def __init__(self, seen: int) -> None:
        self.seen: int = seen
        self.signal: Optional[signal.Signals] = None
        self.why: Optional[str] = None
        """Why the ranks were asked to stop when no signal reached this process (:data:`ABANDONED`)."""
        self.sent = 0.0

    def due(self) -> Optional[signal.Signals]:
        """The signal to send to the ranks now, or None."""
        now = time.monotonic()
        if _StopRequests.count > self.seen:
            self.seen, self.signal = _StopRequests.count, _StopRequests.relayed
        elif self.signal is None and _abandoned():
            self.signal, self.why = signal.SIGTERM, ABANDONED
        elif self.signal is None or now - self.sent <= INTERRUPT_RESEND:
            return None
        self.sent = now
        return self.signal


def stopped_error(who: str, relay: StopRelay, where: str) -> RunStopped:
    """The error of a run whose ranks (``who``) stopped after a checkpoint: why they were asked to where no signal
    reached this process (``relay.why``), that starting the job again resumes it, and ``where`` its logs are."""
    because = "" if relay.why is None else f", sent them because {relay.why}"
    return RunStopped(f"{who} stopped on a signal after a checkpoint (exit status {STOPPED_EXIT}){because}; "
                      f"starting the job again resumes the run. {where}")


def start(label: str, argv: Sequence[str], log: Path, env: Mapping[str, str], rank: bool = False,
          cores: Optional[Sequence[int]] = None) -> Supervised:
    """Start ``argv`` in a new session with its output in ``log``; a ``rank`` with :func:`ignore_stop_signals`;
    bound to ``cores`` (``sched_setaffinity``, inherited by everything it starts) if given."""
    log.parent.mkdir(parents=True, exist_ok=True)

    def before_exec() -> None:
        if rank:
            ignore_stop_signals()
        if cores is not None:
            os.sched_setaffinity(0, cores)

    with open(log, "wb") as out:
        out.write(f"$ {shlex.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
                                start_new_session=True, preexec_fn=before_exec if rank or cores is not None else None)
    return Supervised(label, log, proc, rank, _StopRequests.count)


def stop(processes: Sequence[Supervised]) -> None:
    """SIGTERM every process group that still has members, then SIGKILL what is left after a grace period.

    Whole groups, not just the processes started: Debian's proot ignores SIGTERM and outlives the ``udocker run``
    that started it, so a group whose leader has exited may still hold a live rank or rendezvous server.
    """
    for p in processes:
        if group_members(p.proc.pid):
            signal_group(p.proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(_reap_and_check(p) for p in processes):
        time.sleep(0.1)
    for p in processes:
        if _reap_and_check(p):
            signal_group(p.proc, signal.SIGKILL)
    for p in processes:
        p.proc.wait()
    # SIGKILL is delivered at once, but a killed member whose parent is gone stays in /proc until init reaps it
    deadline = time.monotonic() + KILL_REAP_WAIT
    while time.monotonic() < deadline and any(group_members(p.proc.pid) for p in processes):
        time.sleep(0.05)


def _reap_and_check(p: Supervised) -> bool:
    """Whether ``p``'s group still has live members, after reaping ``p`` itself if it has exited."""
    p.proc.poll()
    return bool(group_members(p.proc.pid))


def _stat_fields(stat: Path) -> Optional[list[str]]:
    """The fields of a /proc/PID/stat after the command's name (state, parent, process group, ...); None where the
    process has gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parent_of(pid: int) -> Optional[int]:
    """The parent of live process ``pid``; None where it has gone (or is a zombie)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return None if fields is None or fields[0] in ("Z", "X") else int(fields[1])


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat)
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads (it was started in a session of its own)."""
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


HOROVOD_SHUTDOWN = "Horovod has been shut down"
"""What Horovod prints in a rank that fails because another rank is gone: such a failure is an echo, not a cause."""
FAILURE_SETTLE = 3.0
"""Seconds a failure waits for the other processes to end too, so that the one that failed first can be named."""


def by_signal(code: int) -> bool:
    """Whether exit status ``code`` means death by a signal: negative from Popen, 128 + N from a container (where
    :mod:`hvdflow_trainer.last_exit` reports a command killed by signal N as a shell does)."""
    return code < 0 or 128 < code < 128 + signal.NSIG


def exit_text(code: int) -> str:
    """``exit code N``, with the signal named where the status means one (``exit code 137 (SIGKILL)``)."""
    if by_signal(code):
        number = -code if code < 0 else code - 128
        try:
            return f"exit code {code} ({signal.Signals(number).name})"
        except ValueError:
            return f"exit code {code} (signal {number})"
    return f"exit code {code}"


def is_echo(log: Path) -> bool:
    """Whether the process logging to ``log`` failed on another rank's loss (Horovod's shutdown message)."""
    try:
        return HOROVOD_SHUTDOWN in log.read_text(errors="replace")
    except OSError:
        return False


def failure_error(processes: Sequence[Supervised], finished: Sequence[Supervised]) -> LaunchError:
    """The error naming the process that failed first, once the others have had a moment to end as well.

    When a rank dies its peers fail soon after with Horovod's shutdown message; they are echoes. The culprit is a
    failed process that is no echo, preferring a death by signal (SIGKILL, out of memory), then another status than
    1. Where every failure is an echo and a rank of ``finished`` (exited 0 before the failure) is not, that rank died
    in a way its runtime reported as success (udocker can exit 0 for a rank killed inside the container).
    """
    deadline = time.monotonic() + FAILURE_SETTLE
    while time.monotonic() < deadline and any(p.proc.poll() is None for p in processes):
        time.sleep(0.1)
    failed = [(p, p.proc.returncode) for p in processes if p.proc.poll() not in (None, 0, STOPPED_EXIT)]
    causes = [(p, code) for p, code in failed if not is_echo(p.log)]
    if not causes:
        silent = [p for p in finished if not is_echo(p.log)]
        if silent:
            p = silent[0]
            return LaunchError(f"{p.label} ended (status 0) before the run did, and the others failed on its loss: it "
                               f"was probably killed inside the container (SIGKILL, out of memory); the other processes "
                               f"were stopped. Log: {p.log}\n{log_tail(p.log)}")
    p, code = min(causes or failed, key=lambda failure: 0 if by_signal(failure[1]) else 2 if failure[1] == 1 else 1)
    return LaunchError(f"{p.label} failed with {exit_text(code)}; the other processes were stopped. "
                       f"Log: {p.log}\n{log_tail(p.log)}")


def supervise(processes: Sequence[Supervised], timeout: Optional[float] = None,
              follow: Optional[Callable[[], None]] = None) -> None:
    """Wait for all processes to exit 0; on the first failure or the timeout stop the others and raise LaunchError.

    No ``timeout`` means no limit of hvdflow's own (a Slurm job's limit is Slurm's to enforce). Processes that exit
    with :data:`STOPPED_EXIT` stopped on a signal after a checkpoint: when all of them did, RunStopped. ``follow``
    is called on every poll (to copy progress into the rule's log). Each stop this process is asked for (see
    :class:`StopRelay`) goes on to the ranks' process groups, repeated every :data:`INTERRUPT_RESEND` seconds until
    they exit: they checkpoint and stop together.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    relay = StopRelay(min((p.interrupts_before for p in processes), default=_StopRequests.count))
    pending = list(processes)
    stopped: list[Supervised] = []
    finished: list[Supervised] = []
    try:
        while pending:
            exited = [(p, p.proc.poll()) for p in pending]
            if any(code not in (None, 0, STOPPED_EXIT) for _, code in exited):
                raise failure_error(processes, finished)
            for p, code in exited:
                if code == STOPPED_EXIT:
                    stopped.append(p)
                    stopping_deadline = time.monotonic() + STOPPING_WAIT
                    deadline = stopping_deadline if deadline is None else min(deadline, stopping_deadline)
                if code == 0:
                    finished.append(p)
                if code is not None:
                    pending.remove(p)
            if follow is not None:
                follow()
            relayed = relay.due()
            if relayed is not None:
                for p in pending:
                    if p.rank:
                        signal_group(p.proc, relayed)
            if pending and deadline is not None and time.monotonic() > deadline:
                names = ", ".join(p.label for p in pending)
                what = "after the others stopped on a signal" if stopped else f"after {timeout:.0f} s"
                raise LaunchError(f"{names} still running {what}; stopped. Logs: " + ", ".join(str(p.log) for p in pending))
            time.sleep(0.2)
        if stopped:
            raise stopped_error(", ".join(p.label for p in stopped), relay, f"Log: {stopped[0].log}")
    finally:
        stop(processes)


def supervise_mpirun(launcher: Supervised, logs: Path, timeout: Optional[float] = None, progress: Optional[Path] = None
                     ) -> None:
    """Wait for ``mpirun``; on failure, LaunchError naming the rank mpirun reports and that rank's log in ``logs``.

    Rank 0's progress lines are copied to ``progress`` (the rule's log) meanwhile.
    """
    try:
        supervise([launcher], timeout, follow=ProgressFollower(logs / "rank-0.log", progress))
    except RunStopped:
        raise
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


def run_one(runtime: Runtime, command: Sequence[str], paths: Sequence[Path], log: Path, timeout: Optional[float],
            what: str) -> None:
    """Run one non-distributed step (preparation, evaluation) in the runtime; LaunchError naming ``what`` and the log,
    and carrying the error in the user's terms where the step failed in the user's code (a reader, a model), so that
    the rule's own log holds it, not only a pointer to ``log``."""
    process = start(what, runtime.command(command, {}, paths), log, runtime.process_env())
    try:
        supervise([process], timeout)
    except LaunchError as exc:
        said = user_code_error(log.read_text(errors="replace")) if log.exists() else None
        if said is None:
            raise
        raise LaunchError(f"{exc}\nthe error in your code: {said}") from None


class ProgressFollower:
    """Copies the trainer's progress lines (``hvdflow: ...``) from rank 0's log to the rule's log as they come."""

    PREFIX = b"hvdflow: "

    def __init__(self, source: Path, sink: Optional[Path]) -> None:
        # from the log's current end: a rank log appended to by an earlier attempt was copied then
        self.source, self.sink, self.partial = source, sink, b""
        self.offset = source.stat().st_size if source.exists() else 0

    def __call__(self) -> None:
        """Copy the complete progress lines written since the last call (to stderr where there is no sink)."""
        try:
            with open(self.source, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            if line.startswith(self.PREFIX):
                note(self.sink, line.decode(errors="replace"))


def note(sink: Optional[Path], line: str) -> None:
    """Append one line to ``sink`` (the rule's log), or print it to stderr where there is none (a command's stdout
    is its result, e.g. ``hvdflow smoke``'s JSON summary)."""
    if sink is None:
        print(line, file=sys.stderr, flush=True)
        return
    with open(sink, "a") as handle:
        handle.write(line + "\n")
