"""Before a training launch: resume the run, refuse a checkpoint of another run, or start over; and the run's attempts.

The checkpoint folder (``results/<experiment>/checkpoints``) is not a declared output, so Snakemake's retries and
reruns leave it alone; this module decides what a new attempt does with it:

- an unfinished run with the same identity (experiment config less its run settings, image digest, dataset index):
  resume from its newest sound checkpoint;
- an unfinished run with another identity: refuse, naming every difference, unless ``resume: never``;
- a finished run, or ``resume: never``: move the folder aside to ``checkpoints.previous/<UTC time>``, never delete it.

Each attempt is one entry of ``attempts.json`` in the folder (Slurm job id and restart count, where it started and
ended, and how it ended); an entry still marked running when the next attempt starts was killed without a word.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional

from hvdflow.config.experiment import RUN_SETTINGS
from hvdflow.config.user_code import UserModel, tree_sha256
from hvdflow.errors import LaunchError, RunStopped
from hvdflow.files.atomic import write_json_atomic
from hvdflow.slurm.jobinfo import restart_count
from hvdflow_runstate import (
    CheckpointError,
    identity_differences,
    newest_sound_checkpoint,
    position,
    read_manifest,
    run_identity,
    sha256_file,
)

ATTEMPTS = "attempts.json"
KILLED = "ended without a word: killed (time limit, preemption, a lost node or a cancelled job) before it could record"


def identity_of(spec: Mapping[str, Any], image_digest: str, index: Path) -> dict[str, object]:
    """The identity of a run of experiment ``spec`` (less its run settings) in image ``image_digest`` on ``index``;
    a user's own model is named with its code's tree hash, so that a checkpoint of other code is never resumed."""
    experiment = {k: v for k, v in sorted(spec.items()) if k not in RUN_SETTINGS}
    model = spec.get("model")
    if isinstance(model, Mapping):
        code = UserModel.from_config("model", model, Path.cwd())
        experiment["model"] = {**model, "code_sha256": tree_sha256(code.files())}
    return run_identity(experiment, image_digest, sha256_file(str(index)))


def _move_aside(folder: Path, why: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = folder.parent / f"{folder.name}.previous" / stamp
    target.parent.mkdir(parents=True, exist_ok=True)
    folder.rename(target)
    return f"{why}: its checkpoints were moved to {target}"


class ResumePlan(NamedTuple):
    """What a new attempt does: ``text`` in words (warnings included), ``start`` the position it starts from."""

    text: str
    start: str


def prepare_checkpoint_folder(folder: Path, identity: Mapping[str, object], resume: str) -> ResumePlan:
    """Make ``folder`` ready for a new attempt (see the module's docstring) and say what the attempt does.

    LaunchError naming the folder and every difference when it holds an unfinished run of another identity, or when
    its manifest is unreadable or names no sound checkpoint.
    """
    try:
        manifest = read_manifest(str(folder))
    except CheckpointError as exc:
        raise LaunchError(str(exc)) from None
    scratch = position(None)
    if manifest is None:
        if folder.is_dir() and any(folder.iterdir()) and not (folder / ATTEMPTS).exists():
            return ResumePlan(_move_aside(folder, f"{folder} has files but neither a manifest nor attempts (not this "
                                                  "hvdflow's checkpoints)"), scratch)
        if (folder / ATTEMPTS).exists():
            return ResumePlan("starting from scratch (the run stopped before its first checkpoint)", scratch)
        return ResumePlan("starting from scratch (no checkpoint)", scratch)
    if manifest.get("finished"):
        return ResumePlan(_move_aside(folder, "the last run finished; starting a new one"), scratch)
    if resume == "never":
        return ResumePlan(_move_aside(folder, "resume: never; starting from scratch"), scratch)
    changes = identity_differences(manifest["identity"], dict(identity))  # type: ignore[arg-type]
    if changes:
        raise LaunchError(f"{folder} holds an unfinished run of another configuration, which this one would not "
                          f"continue exactly: " + "; ".join(changes) + ". Restore those settings to resume it, or set "
                          "resume: never in the experiment to start over (its checkpoints are moved aside, not deleted)")
    entry, warnings = newest_sound_checkpoint(str(folder), manifest)
    if entry is None and manifest["checkpoints"]:
        raise LaunchError(f"{folder}: none of the checkpoints its manifest names is sound ({'; '.join(warnings)}); "
                          "set resume: never to start over (they are moved aside, not deleted)")
    lines = [f"warning: {folder}: {warning}; falling back to an older one" for warning in warnings]
    lines.append(f"resuming from {folder / str(entry['name'])} at {position(entry)}" if entry else
                 "starting from scratch (the run stopped before its first checkpoint)")
    return ResumePlan("\nhvdflow: ".join(lines), position(entry))


def load_attempts(folder: Path) -> list[dict[str, Any]]:
    """The attempts recorded in ``folder`` (empty if none)."""
    path = folder / ATTEMPTS
    return json.loads(path.read_text()) if path.exists() else []


def describe_attempts(attempts: list[dict[str, Any]]) -> list[str]:
    """One line per recorded attempt, for the log of the next one (Snakemake clears a rule's log before each run)."""
    lines = []
    for a in attempts:
        where = f"Slurm job {a['slurm_job_id']}, restart {a['slurm_restart_count']}" if a.get("slurm_job_id") else a["host"]
        error = f" ({a['error']})" if a.get("error") else ""
        lines.append(f"attempt {a['attempt']} ({where}): {a['from']} -> {a.get('to', '?')}: {a['outcome']}{error}")
    return lines


def _newest_checkpoint(folder: Path) -> Optional[dict[str, Any]]:
    """The manifest's entry of the run's newest checkpoint (None: no manifest or no checkpoint yet)."""
    manifest = read_manifest(str(folder))
    return manifest["checkpoints"][-1] if manifest and manifest["checkpoints"] else None  # type: ignore[index,return-value]


def training_finished(folder: Path) -> bool:
    """Whether the run's manifest in ``folder`` says its training finished (rank 0 marks it after writing the
    model, history and metrics, before the ranks write their results); False where it is missing or unreadable."""
    try:
        manifest = read_manifest(str(folder))
    except CheckpointError:
        return False
    return bool(manifest and manifest.get("finished"))


def current_position(folder: Path) -> str:
    """Where the run's newest checkpoint leaves training, in words."""
    return position(_newest_checkpoint(folder))


def stopped_after_signal_checkpoint(checkpoints: Path, since: float, failure: BaseException) -> Optional[RunStopped]:
    """Whether a training that raised ``failure`` stopped after a checkpoint: the RunStopped itself, or a new one if
    a rank failed only after the ranks saved a checkpoint on a stop signal (after ``since``): a time limit or a
    preemption whose SIGKILL (KillWait after the SIGTERM) came before the ranks could exit. None otherwise."""
    if isinstance(failure, RunStopped):
        return failure
    if not isinstance(failure, LaunchError):
        return None
    try:
        newest = _newest_checkpoint(checkpoints)
    except CheckpointError:  # the failure is what the user must see; the next attempt names the manifest
        return None
    if newest is None or not str(newest.get("reason", "")).startswith("signal") or float(newest["unix"]) < since:
        return None
    return RunStopped(f"training stopped on a signal after a checkpoint ({newest['name']}, {newest['reason']}); "
                      f"then {str(failure).splitlines()[0]}")


def begin_attempt(folder: Path, plan: ResumePlan) -> list[dict[str, Any]]:
    """Record a new attempt as running (marking a previous one still running as killed, where the newest checkpoint
    left it); all attempts so far."""
    folder.mkdir(parents=True, exist_ok=True)
    attempts = load_attempts(folder)
    for attempt in attempts:
        if attempt["outcome"] == "running":
            attempt.update({"outcome": KILLED, "to": current_position(folder)})
    job = os.environ.get("SLURM_JOB_ID")
    attempts.append({"attempt": len(attempts) + 1, "slurm_job_id": job,
                     "slurm_restart_count": restart_count(job, os.environ) if job else None,
                     "host": os.uname().nodename, "start_unix": time.time(), "plan": plan.text,
                     "from": plan.start, "outcome": "running"})
    write_json_atomic(folder / ATTEMPTS, attempts)
    return attempts


def end_attempt(folder: Path, outcome: str, error: Optional[str] = None) -> list[dict[str, Any]]:
    """Record how the running attempt ended; all attempts so far."""
    attempts = load_attempts(folder)
    attempts[-1].update({"end_unix": time.time(), "to": current_position(folder), "outcome": outcome})
    if error:
        attempts[-1]["error"] = error.splitlines()[0]
    write_json_atomic(folder / ATTEMPTS, attempts)
    return attempts
