"""The Snakemake processes inside a Slurm job end with the job's batch shell, as a job's processes do under cgroups.

The Slurm plugin's job runs ``sh`` (the batch script) -> Snakemake (the job step executor) -> ``sh -c`` -> Snakemake
(the rule). When Slurm ends a run of the job (a requeue, a time limit, ``scancel``) it sends SIGTERM to the job's
processes, and SIGKILL KillWait seconds later. The shell dies of the SIGTERM at once; Snakemake's handler waits for
its jobs (and can wait forever: it takes the scheduler's lock, which the main thread it interrupted may hold). Where
Slurm tracks a job's processes by their parents (``proctrack/linuxproc``), Snakemake is no longer a descendant of the
job once its shell is gone, and the SIGKILL never reaches it: on the test bed such a Snakemake outlived its job.

:func:`end_with_batch_shell` runs in each of them (the Snakefile calls it): a daemon thread watches the batch shell,
and once it has gone, the process has Slurm's KillWait (plus a margin) to finish, then it ends itself with SIGKILL,
as a cgroup-tracked job's processes would be. The shell is the first Snakemake's parent; it is handed to the rule's
Snakemake through :data:`BATCH_SHELL_VARIABLE`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable, Optional

BATCH_SHELL_VARIABLE = "HVDFLOW_BATCH_SHELL"
"""``<pid>:<start time>`` of the job's batch shell, set by the first Snakemake of the job for those it starts."""

DEFAULT_KILL_WAIT = 30
"""Slurm's default KillWait (seconds), used where ``scontrol show config`` does not answer."""

MARGIN_SECONDS = 10
"""Time past KillWait before a Snakemake whose shell has gone ends itself."""

POLL_SECONDS = 1.0


def start_time(pid: int) -> Optional[str]:
    """Process ``pid``'s start time (field 22 of /proc/<pid>/stat, in clock ticks since boot); None if it is gone.
    With the pid it names one process, not a later one that reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: the fields after it start at the last ')'
    return stat[stat.rindex(")") + 2:].split()[19]


def alive(shell: str) -> bool:
    """Whether the process ``shell`` (``<pid>:<start time>``) still runs."""
    pid, started = shell.split(":", 1)
    return start_time(int(pid)) == started


def kill_wait(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> int:
    """Slurm's KillWait in seconds, from ``scontrol show config``; :data:`DEFAULT_KILL_WAIT` if it does not say."""
    try:
        shown = run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return DEFAULT_KILL_WAIT
    for line in shown.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "KillWait":
            digits = value.strip().split()[0] if value.strip() else ""
            return int(digits) if digits.isdigit() else DEFAULT_KILL_WAIT
    return DEFAULT_KILL_WAIT


def watch(shell: str, grace: Callable[[], float], end: Callable[[], None], poll: float = POLL_SECONDS) -> None:
    """Wait until process ``shell`` has gone, then ``grace()`` seconds more, then call ``end``."""
    while alive(shell):
        time.sleep(poll)
    time.sleep(grace())
    end()


def end_with_batch_shell() -> Optional[str]:
    """In a Snakemake inside a Slurm job: end this process with SIGKILL once the job's batch shell has gone and
    KillWait plus :data:`MARGIN_SECONDS` have passed. The shell watched (``<pid>:<start time>``); None where this
    process's parent cannot be read (it has gone: nothing to watch)."""
    shell = os.environ.get(BATCH_SHELL_VARIABLE)
    if shell is None:
        parent = os.getppid()
        started = start_time(parent)
        if started is None:
            return None
        shell = os.environ[BATCH_SHELL_VARIABLE] = f"{parent}:{started}"
    threading.Thread(target=watch, name="hvdflow-batch-shell",
                     args=(shell, lambda: kill_wait() + MARGIN_SECONDS, lambda: os.kill(os.getpid(), signal.SIGKILL)),
                     daemon=True).start()
    return shell
