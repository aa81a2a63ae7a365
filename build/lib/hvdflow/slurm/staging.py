"""Node-local staging of a prepared dataset inside a Slurm job: one task per node copies, the others wait.

Run as a job step with the training step's layout (``python -m hvdflow.slurm.staging stage SOURCE DEST REPORT_DIR
LIVE_JOBS``): the task with local id 0 first removes what the user's ended jobs left on its node's scratch (a job that
Slurm killed, or one that ended on a signal, cannot clean up after itself), then copies the shards and ``index.json``
to ``DEST``, checks every shard's sha256 against the index, and renames the copy into place; the node's other tasks
wait for it. Every task writes what srun told it (node, tasks per node) to ``REPORT_DIR/task-<rank>.json``, which the
MPI launch mode reads. ``clean JOB_DIR`` (one task per node) removes the job's folder.

Node scratch is shared with other users' jobs, and job ids are predictable, so a job's folder lives in a folder of
the user's own, ``<scratch>/hvdflow-<user>/job-<id>`` (:func:`job_scratch`): made 0700 without following a link and
checked on the open folder (:mod:`hvdflow.files.private`); a link, another user's folder or one others can write at
that name is refused by name. The steps run with umask 077: every staged file is 0600.

Both ignore SIGUSR1: ``--signal=USR1@<grace>`` warns every step of the job, and the warning is meant for the ranks
(they checkpoint and stop). A staging or clean-up step it caught would die of SIGUSR1's default action: a half-done
staging would fail the attempt, a clean-up would leave the staged copy on the nodes. The limit's SIGTERM still ends
them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from hvdflow.code_location import code_location
from hvdflow.errors import LaunchError
from hvdflow.files.heartbeat import elapsed_text, heartbeat, size_text
from hvdflow.files.private import RANKS_TMPDIR, UnsafePlace, check_private, private_dir, remove_own
from hvdflow_index import DatasetError, read_index, verified_shards
from hvdflow_wire import WireError
from hvdflow_wire.staging import StagingReport

USER_DIR_PREFIX = "hvdflow-"
"""The user's folder on node-local scratch is ``<scratch>/hvdflow-<user name>``."""

JOB_DIR_PREFIX = "job-"
"""A job's folder in it is ``job-<Slurm job id>``."""


def user_scratch(scratch: Path) -> Path:
    """This user's folder on node-local ``scratch`` (the same path on every node: Slurm needs the same users there)."""
    try:
        name = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        name = str(os.getuid())
    return scratch / f"{USER_DIR_PREFIX}{name}"


def job_scratch(scratch: Path, job_id: str) -> Path:
    """Job ``job_id``'s folder on node-local ``scratch``: its staged dataset goes to ``dataset`` in it, the ranks'
    temporary files to :func:`ranks_tmp`."""
    return user_scratch(scratch) / f"{JOB_DIR_PREFIX}{job_id}"


def ranks_tmp(job_dir: Path) -> Path:
    """The ranks' ``TMPDIR`` in the job's folder ``job_dir``: what a killed rank leaves there (TensorFlow's AutoGraph
    files, udocker's) goes with the job's folder, never into the node's shared /tmp."""
    return job_dir / "tmp"


def private_job_dir(job_dir: Path) -> Path:
    """Make the user's scratch folder, the job's folder in it and the ranks' tmp (:func:`ranks_tmp`), private and
    checked; UnsafePlace naming a path that is not the user's alone, LaunchError where scratch is not writable."""
    try:
        private_dir(job_dir.parent, "stage")
        private_dir(job_dir, "stage")
        private_dir(ranks_tmp(job_dir), RANKS_TMPDIR)
        return job_dir
    except OSError as exc:
        raise LaunchError(f"node-local scratch {job_dir.parent.parent} on {os.uname().nodename} is not writable: "
                          f"{exc.strerror} (set scratch_dir in the profile's hvdflow.yaml)") from None


def stage(source: Path, dest: Path) -> int:
    """Copy the dataset at ``source`` to ``dest`` (``dataset`` in the job's folder) and verify it there; return the
    bytes copied.

    The copy goes to ``DEST.partial`` first, so a half-copied dataset never looks staged.
    """
    host, started = os.uname().nodename, time.monotonic()
    private_job_dir(dest.parent)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    index = read_index(str(source))
    files = [str(shard["file"]) for split in index["splits"]  # type: ignore[attr-defined]
             for shard in index["splits"][split]["shards"]]  # type: ignore[index]
    total = sum((source / name).stat().st_size for name in files)
    copied = 0

    def said() -> str:
        return f"{size_text(copied)} of {size_text(total)} copied"

    with heartbeat(lambda line: print(f"hvdflow: {line}", file=sys.stderr, flush=True), f"staging on {host}", said):
        for name in files:
            copied += _copy(source / name, partial / name)
    _copy(source / "index.json", partial / "index.json")
    try:
        for split in index["splits"]:  # type: ignore[attr-defined]
            verified_shards(str(partial), index, split)
    except DatasetError as exc:
        raise LaunchError(f"staging to {host} failed verification: {exc}") from None
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(partial, dest)
    print(f"hvdflow: staged on {host}: {size_text(copied)} in {len(files)} shards, copied and verified in "
          f"{elapsed_text(time.monotonic() - started)}", file=sys.stderr, flush=True)
    return copied


NO_DATASET = "-"
"""``SOURCE`` of a job that reads no dataset (the benchmark): the step makes an empty ``DEST`` and copies nothing."""

NO_SWEEP = "-"
"""``LIVE_JOBS`` when the user's jobs could not be listed: nothing is swept then."""


def sweep_ended_jobs(user_dir: Path, live_jobs: set[str]) -> list[Path]:
    """Remove the job folders in the user's scratch folder ``user_dir`` whose job is not in ``live_jobs``; return
    those removed.

    Only the user's own private folder is looked into (UnsafePlace if that is not the user's alone); the folders of the
    user's running or requeued jobs (a requeued job keeps its id) stay, and nothing is followed through a link.
    """
    if not check_private(user_dir, "stage"):
        return []
    return [folder for folder in sorted(user_dir.glob(JOB_DIR_PREFIX + "*"))
            if folder.name[len(JOB_DIR_PREFIX):] not in live_jobs and remove_own(folder)]


def clean(job_dir: Path) -> None:
    """Remove the job's folder ``job_dir`` from this node's scratch, if the user's scratch folder is the user's alone
    (UnsafePlace naming it otherwise: nothing is removed through another user's path)."""
    if check_private(job_dir.parent, "clean up"):
        remove_own(job_dir)


def _copy(src: Path, dst: Path) -> int:
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    except OSError as exc:
        raise LaunchError(f"cannot copy {src} to {dst} on {os.uname().nodename}: {exc.strerror}") from None
    return dst.stat().st_size


def wait_for_stage(dest: Path, timeout: Optional[float] = None) -> None:
    """Block until ``dest/index.json`` exists on this node (the node's first task staged it).

    No limit by default: if the staging task fails, srun's ``--kill-on-bad-exit`` ends the waiting ones.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            if (dest / "index.json").exists():
                return
        except OSError as exc:  # the node's first task refused the path (another user's): it says why
            raise LaunchError(f"cannot wait for {dest} on {os.uname().nodename}: {exc.strerror}") from None
        if deadline is not None and time.monotonic() > deadline:
            raise LaunchError(f"{dest} was not staged on {os.uname().nodename} within {timeout:.0f} s")
        time.sleep(0.2)


def read_reports(report_dir: Path) -> list[StagingReport]:
    """What every task of the staging step reported, in rank order; LaunchError naming a malformed report."""
    try:
        reports = [StagingReport.read(str(p)) for p in report_dir.glob(StagingReport.GLOB)]
    except WireError as exc:
        raise LaunchError(f"a malformed staging report: {exc}") from None
    return sorted(reports, key=lambda r: r.rank)


def main(argv: list[str]) -> int:
    """``stage SOURCE DEST REPORT_DIR LIVE_JOBS`` or ``clean DEST``, as one task of a Slurm job step.

    ``LIVE_JOBS``: the user's jobs that Slurm lists, comma-separated (``-``: unknown, sweep nothing).
    """
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    os.umask(0o077)
    env = os.environ
    try:
        if argv[0] == "clean":
            clean(Path(argv[1]))
            return 0
        source, dest, reports, live = Path(argv[1]), Path(argv[2]), Path(argv[3]), argv[4]
        started = time.monotonic()
        swept: list[Path] = []
        if env.get("SLURM_LOCALID") == "0":
            if live != NO_SWEEP:
                swept = sweep_ended_jobs(dest.parent.parent, set(live.split(",")))
            for folder in swept:
                print(f"hvdflow staging: removed {folder} on {os.uname().nodename}, left by ended job "
                      f"{folder.name[len(JOB_DIR_PREFIX):]}", file=sys.stderr)
            if str(source) == NO_DATASET:
                private_job_dir(dest.parent)
                dest.mkdir(exist_ok=True)
                copied: Optional[int] = 0
            else:
                copied = stage(source, dest)
        else:
            copied = None
            if str(source) != NO_DATASET:
                wait_for_stage(dest)
        StagingReport(
            procid=env.get("SLURM_PROCID", ""), localid=env.get("SLURM_LOCALID"), nodeid=env.get("SLURM_NODEID"),
            nodename=env.get("SLURMD_NODENAME"), step_nodelist=env.get("SLURM_STEP_NODELIST"),
            step_tasks_per_node=env.get("SLURM_STEP_TASKS_PER_NODE"), step_num_nodes=env.get("SLURM_STEP_NUM_NODES"),
            step_num_tasks=env.get("SLURM_STEP_NUM_TASKS"), hostname=os.uname().nodename, bytes_copied=copied,
            swept=[str(p) for p in swept], seconds=round(time.monotonic() - started, 3),
            hvdflow_source=str(code_location())).write(str(reports))
        return 0
    except UnsafePlace as exc:
        print(f"hvdflow staging: error: node-local scratch on {os.uname().nodename}: {exc}", file=sys.stderr)
        return 1
    except (LaunchError, DatasetError) as exc:
        print(f"hvdflow staging: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
