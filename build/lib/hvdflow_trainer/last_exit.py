"""Run a command so that the container engine reports the command's own exit status: this process exits last.

proot (udocker's P1 and P2 modes) exits with the status of the *last* traced process or thread to exit, not of the
one it started: ``proot sh -c '(sleep 1) & exit 75'`` exits 0. A rank that stopped after a checkpoint with status
75 was once reported as 0 in CI, and the run was then called incomplete instead of stopped. This wrapper starts the
command as its child and makes itself the child subreaper of all it starts, so nothing the command leaves behind
escapes it; when the command has exited it stops and reaps what is left (SIGTERM, then SIGKILL after
:data:`LEFTOVER_GRACE` seconds) and exits, the last process in the container, with the command's status (128 + the
signal for a command killed by one, as a shell reports it).

Signals: the wrapper keeps the dispositions it was started with (an ignored stop signal stays ignored, and the
command inherits that as before), except that a Ctrl-C, which reaches the command itself through the process group,
does not end the wrapper before the command. Under udocker's R1 the wrapper is PID 1 of the container's own pid
namespace, in a session of its own: runc passes the signals it gets to this process only, and the kernel delivers
to a namespace's init only the signals it handles. There the wrapper passes :data:`FORWARDED` on to the command
(which still starts with the dispositions the wrapper was started with), and asks the kernel for SIGKILL when runc,
its parent, dies (PR_SET_PDEATHSIG): a SIGKILL of the launcher's process group then ends the whole container, where
it left it running before. Stdlib only, started with ``python3 -S`` (tens of milliseconds).

``python3 -S -m hvdflow_trainer.last_exit -- COMMAND [ARGS...]``
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)
"""What the wrapper passes on to the command as a pid namespace's init: the stop signals and a hang-up."""
LEFTOVER_GRACE = 2.0
"""Seconds that processes the command left behind get between SIGTERM and SIGKILL."""


def _prctl(option: int, value: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "prctl(%s): %s" % (name, os.strerror(err)))


def become_subreaper() -> None:
    """Make orphaned descendants this process's children (prctl PR_SET_CHILD_SUBREAPER), so they are reaped here."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")


class Forwarder:
    """As a pid namespace's init: :data:`FORWARDED` signals passed on to the command (kept until it has started)."""

    def __init__(self) -> None:
        self.started_with = {sig: signal.getsignal(sig) for sig in FORWARDED}
        self.child: Optional["subprocess.Popen[bytes]"] = None
        self.pending: List[int] = []
        for sig in FORWARDED:
            signal.signal(sig, self._handle)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")

    def restore_in_child(self) -> None:
        """In the command's process before its exec: the dispositions this wrapper was started with."""
        for sig, disposition in self.started_with.items():
            if disposition is signal.SIG_IGN:
                signal.signal(sig, signal.SIG_IGN)

    def started(self, child: "subprocess.Popen[bytes]") -> None:
        """The command runs: pass on what came before it."""
        self.child = child
        for sig in self.pending:
            self._send(sig)
        self.pending = []

    def _handle(self, signum: int, frame: object) -> None:
        if self.child is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def _send(self, signum: int) -> None:
        try:
            os.kill(self.child.pid, signum)  # type: ignore[union-attr]
        except ProcessLookupError:
            pass


def children() -> List[int]:
    """The live processes whose parent is this one, from /proc."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[1]) == me:
            found.append(int(entry))
    return found


def reap_all() -> bool:
    """Reap every child that has exited; True when no child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def end_leftovers(grace: float = LEFTOVER_GRACE) -> None:
    """Stop and reap what the command left behind: SIGTERM now, SIGKILL to what is left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if reap_all():
            return
        for pid in children():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if reap_all():
                return
            time.sleep(0.02)


def shell_status(returncode: int) -> int:
    """A Popen return code as an exit status: the code itself, or 128 + N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run(command: List[str]) -> int:
    """Run ``command`` as this process's child, end what it leaves behind, and return its exit status."""
    become_subreaper()
    forwarder = Forwarder() if os.getpid() == 1 else None
    if forwarder is None and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda signum, frame: None)  # the command got it too, from the group
    try:
        child = subprocess.Popen(command, preexec_fn=forwarder.restore_in_child if forwarder else None)
    except OSError as exc:
        print("hvdflow: cannot start %s: %s" % (command[0], exc), file=sys.stderr, flush=True)
        return 127
    if forwarder is not None:
        forwarder.started(child)
    code = child.wait()
    end_leftovers()
    return shell_status(code)


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python3 -S -m hvdflow_trainer.last_exit -- COMMAND [ARGS...]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python3 -S -m hvdflow_trainer.last_exit -- COMMAND [ARGS...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
