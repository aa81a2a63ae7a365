"""Node-local staging of a prepared dataset inside a Slurm job: one task per node copies, the others wait.

Run as a job step with the training step's layout (``python -m hvdflow.slurm.staging stage SOURCE DEST REPORT_DIR
LIVE_JOBS``): the task with local id 0 first removes what the user's ended jobs left on its node's scratch (a job that
Slurm killed, or one that ended on a signal, cannot clean up after itself), then copies the shards and ``index.json``
to ``DEST``, checks every shard's sha256 against the index, and renames the copy into place; the node's other tasks
wait for it. Every task writes what srun told it (node, tasks per node) to ``REPORT_DIR/task-<rank>.json``, which the
MPI launch mode reads. ``clean DEST`` (one task per node) removes the staged copy.

Both ignore SIGUSR1: ``--signal=USR1@<grace>`` warns every step of the job, and the warning is meant for the ranks
(they checkpoint and stop). A staging or clean-up step it caught would die of SIGUSR1's default action: a half-done
staging would fail the attempt, a clean-up would leave the staged copy on the nodes. The limit's SIGTERM still ends
them.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from hvdflow import code_location
from hvdflow.errors import LaunchError
from hvdflow_index import DatasetError, read_index, verified_shards
from hvdflow_wire import WireError
from hvdflow_wire.staging import StagingReport


def stage(source: Path, dest: Path) -> int:
    """Copy the dataset at ``source`` to ``dest`` and verify it there; return the bytes copied.

    The copy goes to ``DEST.partial`` first, so a half-copied dataset never looks staged.
    """
    host = os.uname().nodename
    partial = dest.with_name(dest.name + ".partial")
    try:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    except OSError as exc:
        raise LaunchError(f"node-local scratch {dest.parent} on {host} is not writable: {exc.strerror} "
                          f"(set scratch_dir in the profile's hvdflow.yaml)") from None
    index = read_index(str(source))
    copied = 0
    for split in index["splits"]:  # type: ignore[attr-defined]
        for shard in index["splits"][split]["shards"]:  # type: ignore[index]
            copied += _copy(source / shard["file"], partial / shard["file"])
    _copy(source / "index.json", partial / "index.json")
    try:
        for split in index["splits"]:  # type: ignore[attr-defined]
            verified_shards(str(partial), index, split)
    except DatasetError as exc:
        raise LaunchError(f"staging to {host} failed verification: {exc}") from None
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(partial, dest)
    return copied


JOB_DIR_PREFIX = "hvdflow-job-"
"""A job's directory on node-local scratch is ``<scratch>/hvdflow-job-<Slurm job id>``."""

NO_DATASET = "-"
"""``SOURCE`` of a job that reads no dataset (the benchmark): the step makes an empty ``DEST`` and copies nothing."""

NO_SWEEP = "-"
"""``LIVE_JOBS`` when the user's jobs could not be listed: nothing is swept then."""


def sweep_ended_jobs(scratch: Path, live_jobs: set[str]) -> list[Path]:
    """Remove this user's job directories on ``scratch`` whose job is not in ``live_jobs``; return those removed.

    Another user's directories, and those of the user's running or requeued jobs (a requeued job keeps its id), stay.
    """
    removed = []
    for folder in sorted(scratch.glob(JOB_DIR_PREFIX + "*")):
        try:
            mine = folder.lstat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and folder.name[len(JOB_DIR_PREFIX):] not in live_jobs:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


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
    while not (dest / "index.json").exists():
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
    env = os.environ
    try:
        if argv[0] == "clean":
            shutil.rmtree(Path(argv[1]), ignore_errors=True)
            shutil.rmtree(Path(argv[1] + ".partial"), ignore_errors=True)
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
                dest.mkdir(parents=True, exist_ok=True)
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
    except (LaunchError, DatasetError) as exc:
        print(f"hvdflow staging: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
