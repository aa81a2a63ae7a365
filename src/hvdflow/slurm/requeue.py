"""Resume a stopped run in the same Slurm job: ``scontrol requeue`` of the job the train rule runs in.

After the ranks stopped on a signal and rank 0 saved a checkpoint, the train step asks Slurm to requeue its own
job: Slurm ends the job now and starts it again, with the same id and ``SLURM_RESTART_COUNT`` one higher, and the
restarted job resumes from the checkpoint. A job that is not requeueable (no ``--requeue`` and ``JobRequeue=0``), or
a Slurm that refuses, leaves the step failing, so that the rule's ``retries`` submit a new job that resumes.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import NoReturn, Optional

from hvdflow.errors import LaunchError, RunStopped
from hvdflow.launch.supervise import note


def restart_count(job: str) -> int:
    """How many times Slurm has restarted job ``job`` (requeues), from ``scontrol show job``.

    ``$SLURM_RESTART_COUNT`` says the same in the batch shell, but the Slurm executor plugin's job step removes it
    from the environment the rule runs in.
    """
    restarts = os.environ.get("SLURM_RESTART_COUNT")
    if restarts is not None:
        return int(restarts)
    try:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"cannot ask Slurm about job {job}: {exc}") from None
    match = re.search(r"\bRestarts=(\d+)", shown.stdout)
    if shown.returncode != 0 or match is None:
        raise LaunchError(f"scontrol show job {job} gave no restart count: {shown.stderr.strip() or shown.stdout[:200]}")
    return int(match.group(1))


def requeue_or_explain(stopped: RunStopped, log: Optional[Path] = None) -> NoReturn:
    """Requeue the current Slurm job and wait for Slurm to end it; RunStopped saying why if that cannot happen.

    What happens is noted in ``log`` (the rule's log, which the requeued job appends to).
    """
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        raise stopped
    try:
        proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        refusal = proc.stderr.strip() or proc.stdout.strip() if proc.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        refusal = str(exc)
    if refusal:
        raise RunStopped(f"{stopped}\nSlurm did not requeue job {job} ({refusal}); the rule fails, and its retries "
                         "resume the run in a new job") from None
    note(log, f"hvdflow: {stopped}\nhvdflow: job {job} requeued; Slurm ends it now and restarts it to resume")
    # fail at once: this run of the job is over. Waiting for Slurm's kill is no option: with proctrack/linuxproc the
    # process running the rule can outlive the job's end (its parent exits first), and a late failure would make its
    # Snakemake remove the outputs the restarted job has written by then.
    raise RunStopped(f"{stopped}\njob {job} requeued: Slurm ends this run of it and starts it again (same job id), "
                     "which resumes from the checkpoint") from None
