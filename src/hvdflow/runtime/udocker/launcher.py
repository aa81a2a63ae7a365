"""udocker's own command line with its runc mode (R1) made sound: what hvdflow runs instead of the ``udocker`` script.

Run by file path with the interpreter of udocker's environment (``python3 launcher.py ARGS``, exactly as
``udocker ARGS``); it imports only the standard library and udocker, whose ``RuncEngine`` it changes in three places
before handing over to udocker's ``main`` (udocker 1.3.17, ``udocker/engine/runc.py``; measured in
docs/research/udocker-r1-2026-11-27.md). P1 and P2 (proot) and every other command are udocker's own.

- **Exit status and streams.** Without a terminal udocker gives runc a pty, copies it to stdout one byte at a time
  and exits with the ``Popen`` object instead of runc's status: the caller saw status 1 whatever the command's, stdout
  and stderr merged, output lost at the exit (98,401 of 100,000 lines) and a crash on non-ASCII output. Here the
  spec has no terminal and runc runs on the caller's own stdin, stdout and stderr; udocker exits with runc's status,
  which is the container command's.
- **Concurrent runs of one container.** udocker writes the runc bundle's ``config.json`` into the container's own
  folder whenever its root is writable, and a second ``udocker run`` of the container deletes and rewrites it while
  the first runc has not read it yet (4 of 10 concurrent runs started). Here every run gets its own bundle folder,
  the branch udocker takes for a read-only container: a temporary folder under udocker's tmp (``$TMPDIR``), removed
  when udocker exits.

And in every mode, **a stop signal ends udocker through its own exit**: SIGTERM or SIGHUP (where the caller has not
ignored it, as hvdflow does for a rank's, whose trainer checkpoints first) is passed on to udocker's engine (runc,
or proot, which passes it to the command) and udocker waits for it as usual, so its ``main`` then removes what it
made under its tmp: the per-run ``passwd`` and ``group`` copies (P1's ``--hostauth``, R1's user), R1's bundle and
bind folders; before the engine has started, the signal raises ``SystemExit(128 + N)``, on which ``main`` cleans up
too. Killed by the signal's default action udocker left them in the node's /tmp for good: two to four for every
rendezvous server a launcher stops at the end of a run (734 pairs after a day of test runs on one machine). Killing
the engine instead of waiting for it is no way out under P1: proot killed while its command sits in a signal stop
takes the signal with it, and the command sleeps on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, Dict, List, Optional

if __name__ == "__main__" and sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]  # run by path: this folder's udocker.py (hvdflow's) is not the udocker package


def _patch_runc_engine() -> None:
    from udocker.engine.runc import RuncEngine

    set_spec = RuncEngine._set_spec
    run = RuncEngine.run

    def spec_without_terminal(self: Any) -> Dict[str, Any]:
        spec = set_spec(self)
        spec["process"]["terminal"] = False
        return spec

    def run_in_own_bundle(self: Any, container_id: str) -> int:
        self.localrepo.iswriteable_container = lambda container: False
        return run(self, container_id)

    def run_on_callers_streams(self: Any, cmd_l: List[str]) -> int:
        runc = subprocess.Popen(cmd_l, shell=False, close_fds=True)
        while True:
            try:
                status = runc.wait()
                break
            except KeyboardInterrupt:  # runc got the terminal's Ctrl-C too and passes it to the container
                continue
        self._filebind.finish()
        return status

    RuncEngine._set_spec = spec_without_terminal
    RuncEngine.run = run_in_own_bundle
    RuncEngine.run_pty = run_on_callers_streams
    RuncEngine.run_nopty = run_on_callers_streams


def _children() -> List[int]:
    """The live processes whose parent is this one (udocker's engine: proot or runc), from /proc."""
    me, found = os.getpid(), []
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            with open(f"/proc/{stat}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[1]) == me:
            found.append(int(stat))
    return found


def _end_on_stop_signals() -> None:
    """SIGTERM and SIGHUP, unless ignored: passed on to the engine, which udocker then waits for as usual; before
    there is one, ``SystemExit(128 + N)``. Either way udocker's ``main`` cleans up. Later ones are ignored, so that a
    second signal (``runuser``, ``srun`` pass theirs on) cannot cut the clean-up short."""

    def end(signum: int, frame: Optional[object]) -> None:
        for other in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(other, signal.SIG_IGN)
        engines = _children()
        if not engines:
            raise SystemExit(128 + signum)
        for pid in engines:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, end)


def main() -> None:
    """``udocker ARGS`` with :func:`_patch_runc_engine` and :func:`_end_on_stop_signals` applied."""
    _patch_runc_engine()
    _end_on_stop_signals()
    from udocker.maincmd import main as udocker_main

    sys.argv[0] = "udocker"
    sys.exit(udocker_main())


if __name__ == "__main__":
    main()
