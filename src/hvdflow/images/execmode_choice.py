"""Which udocker mode runs a rank, chosen on the node the rank starts on.

``python -m hvdflow.images.execmode_choice RUNS`` is what a launcher starts for each rank where the profile's
``execmode`` is a runc mode or ``auto`` (:meth:`hvdflow.runtime.udocker.runtime.UdockerRuntime.command`). ``RUNS`` is a
JSON object: ``runs``, mode → that mode's ``udocker run`` command line (``{"R1": [...]}`` for ``execmode: R1``,
``{"R1": [...], "P1": [...]}`` for ``auto``), and ``no_runc``, why ``auto`` offers P1's alone (Open MPI's ranks, or no
R1 container was made). The node is probed (:func:`~hvdflow.images.runc_probe.probe_runc_mode`: a user namespace
tried in a child, runc looked for), the choice is written to standard error (the rank's log: every rank says which
mode it ran and why), and the chosen command replaces this process: same pid, same process group, the signal
dispositions it was started with, so nothing stands between the launcher and udocker. An explicit R1 that cannot run
on the node exits :data:`REFUSED` with the reason instead of leaving runc to fail with its own words.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from hvdflow.errors import UdockerError
from hvdflow.images.modes import AUTO_FALLBACK_MODE, AUTO_MODE, RUNC_MODES
from hvdflow.images.runc_probe import RuncProbe, probe_runc_mode

MODULE = "hvdflow.images.execmode_choice"
MODE_ENV = "HVDFLOW_UDOCKER_MODE"
"""The variable that tells the command in the container which mode runs it (the rank's result records it)."""
REFUSED = 2
"""The exit status of a rank whose explicit runc mode cannot run on its node."""


def choose(runs: Mapping[str, Sequence[str]], probe: RuncProbe | None, no_runc: str | None = None
           ) -> tuple[str, str]:
    """The mode of ``runs`` to run on the probed node, and a line for the rank's log saying why; UdockerError naming
    the node and the cause where the only mode offered is a runc mode that cannot run there. ``no_runc`` says why
    ``auto`` offers no runc mode (then nothing is probed: ``probe`` None)."""
    runc = next((mode for mode in runs if mode in RUNC_MODES), None)
    if runc is None or probe is None:
        return AUTO_FALLBACK_MODE, f"execmode {AUTO_MODE} chose {AUTO_FALLBACK_MODE}: {no_runc}"
    cause = probe.cause()
    if AUTO_FALLBACK_MODE not in runs:
        if cause is not None:
            raise UdockerError(str(probe.problem(runc)))
        return runc, f"execmode {runc} on {probe.node} (runc {probe.runc})"
    if cause is None:
        return runc, f"execmode {AUTO_MODE} chose {runc} on {probe.node} (user namespaces allowed, runc {probe.runc})"
    return AUTO_FALLBACK_MODE, f"execmode {AUTO_MODE} chose {AUTO_FALLBACK_MODE} on {probe.node}: {cause}"


def chooser_argv(runs: Mapping[str, Sequence[str]], no_runc: str | None = None) -> list[str]:
    """The command line that runs one of ``runs`` (mode → command line), chosen on the node it starts on; ``no_runc``
    says why ``auto`` offers P1's alone. Python without its site packages (``-S``): the chooser needs the standard
    library and this hvdflow (on PYTHONPATH) only; it runs in about 15 ms to its exec, the node's probe included
    (2026-11-28; 36 ms before it stopped importing dataclasses, pathlib and subprocess, 50 with site packages)."""
    return [sys.executable, "-S", "-m", MODULE, json.dumps({"runs": {mode: list(argv) for mode, argv in runs.items()},
                                                      "no_runc": no_runc})]


def main(argv: Sequence[str]) -> int:
    """Choose, say so on standard error, and exec the chosen command; :data:`REFUSED` with the reason if none can run."""
    plan = json.loads(argv[0])
    runs, no_runc = plan["runs"], plan["no_runc"]
    try:
        mode, note = choose(runs, None if no_runc else probe_runc_mode(), no_runc)
    except UdockerError as exc:
        print(f"hvdflow: error: {exc}", file=sys.stderr, flush=True)
        return REFUSED
    print(f"# hvdflow: {note}", file=sys.stderr, flush=True)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # ignored by Python's start, as subprocess' restore_signals undoes
        signal.signal(signum, signal.SIG_DFL)
    os.execvp(runs[mode][0], runs[mode])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
