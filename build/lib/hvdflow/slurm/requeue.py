"""Resume a stopped run in the same Slurm job: ``scontrol requeue`` of the job the train rule runs in.

After the ranks stopped on a signal and rank 0 saved a checkpoint, the train step asks Slurm to requeue its own
job: Slurm ends the job now and starts it again, with the same id and ``SLURM_RESTART_COUNT`` one higher, and the
restarted job resumes from the checkpoint. A job that is not requeueable (no ``--requeue`` and ``JobRequeue=0``), or
a Slurm that refuses, leaves the step failing, so that the rule's ``retries`` submit a new job that resumes.

Only a job that is still running is requeued (a warning such as ``--signal=USR1@60`` stopped the run). A job Slurm is
ending (SIGTERM to all its processes: a time limit without warning, a preemption, ``scancel``, after which the job's
Snakemake cancels it) is not: ``scontrol requeue`` would restart even a cancelled job, and the rule's retry, which
the Slurm plugin submits for the failed job, would then train the same run in a second job at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn, Optional

from hvdflow.errors import RunStopped
from hvdflow.launch.supervise import note
from hvdflow_runstate import STOPPED_EXIT


def job_state(job: str) -> str:
    """Job ``job``'s state as ``squeue`` shows it (``RUNNING``, ``COMPLETING``, ``CANCELLED``, ...); "" where it is
    not listed or squeue fails."""
    try:
        proc = subprocess.run(["squeue", "--noheader", f"--jobs={job}", "--format=%T"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip().splitlines()[0].strip() if proc.returncode == 0 and proc.stdout.strip() else ""


def requeue_or_explain(stopped: RunStopped, log: Optional[Path] = None) -> NoReturn:
    """Requeue the current Slurm job and end this process (the rule's Snakemake) with the stopped exit status;
    RunStopped saying why if Slurm does not requeue it.

    What happens is noted in ``log`` (the rule's log, which the requeued job appends to).
    """
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        raise stopped
    state = job_state(job)
    if state != "RUNNING":
        raise RunStopped(f"{stopped}\nSlurm is ending job {job} ({state.lower() or 'no longer listed'}), so it is not "
                         "requeued; the rule fails, and its retries resume the run in a new job") from None
    try:
        proc = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        refusal = proc.stderr.strip() or proc.stdout.strip() if proc.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        refusal = str(exc)
    if refusal:
        raise RunStopped(f"{stopped}\nSlurm did not requeue job {job} ({refusal}); the rule fails, and its retries "
                         "resume the run in a new job") from None
    note(log, f"hvdflow: {stopped}\nhvdflow: job {job} requeued; Slurm ends it now and restarts it to resume")
    # End this process at once, not by raising into Snakemake: this run of the job is over, and a Snakemake that
    # lingers is harmful. With proctrack/linuxproc the process running the rule can outlive the job's end (its parent
    # exits first): a late failure there would remove the outputs the restarted job has written by then, and after
    # Slurm's SIGTERM (Snakemake's handler takes its scheduler's lock) such a process was seen on the test bed waiting
    # forever on a lock in its main thread, long after its job was requeued. The rule's and the job's logs say why.
    print(f"hvdflow: {stopped}\njob {job} requeued: Slurm ends this run of it and starts it again (same job id), "
          "which resumes from the checkpoint", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(STOPPED_EXIT)
