"""Fault injection for tests, the host's side: the environment variables the end-to-end tests set, read here only.

- ``HVDFLOW_INJECT_RANK_FAILURE=RANK:EPOCH[.STEP][:exit|exit0|kill|signal][:once]`` makes a rank fail on purpose;
  several, separated by commas, fail in turn (``once`` then said for all of them: each fails in one attempt);
  :func:`trainer_args` turns them into the trainer's hidden options (:mod:`hvdflow_trainer.faults` reads them).
- ``HVDFLOW_INJECT_SLOW_STEPS=SECONDS`` makes every rank sleep that long after each step: a run that outlasts a
  Slurm time limit however fast or loaded the machine is, with the weights of an unslowed run.
  ``SECONDS:input`` makes every rank's input pipeline sleep that long before each batch instead: an input-bound run.
- ``HVDFLOW_ELASTIC_SLOTS`` is how many one-rank slots this machine offers an elastic run (default: the experiment's
  ``ranks``), to start a run on fewer ranks than it is set for, as a Slurm job that got fewer nodes would.

Production code consults this module through one call at each place; without the variables every call is a no-op.
"""

from __future__ import annotations

import os
from typing import Optional

from hvdflow.errors import LaunchError

INJECT_RANK_FAILURE = "HVDFLOW_INJECT_RANK_FAILURE"
INJECT_SLOW_STEPS = "HVDFLOW_INJECT_SLOW_STEPS"
ELASTIC_SLOTS = "HVDFLOW_ELASTIC_SLOTS"
HOW = ("exit", "exit0", "kill", "signal")


def injected_rank_failure() -> Optional[str]:
    """The failure a test asked for with ``HVDFLOW_INJECT_RANK_FAILURE`` (None: none)."""
    return os.environ.get(INJECT_RANK_FAILURE)


def injected_slow_steps() -> Optional[str]:
    """The seconds each step is to be slowed by that a test asked for with ``HVDFLOW_INJECT_SLOW_STEPS`` (None:
    none)."""
    return os.environ.get(INJECT_SLOW_STEPS)


def trainer_args(fail: Optional[str], slow_steps: Optional[str] = None) -> list[str]:
    """The trainer's hidden test options for ``RANK:EPOCH[.STEP][:exit|exit0|kill|signal][:once]``, or several of
    them separated by commas, and for ``slow_steps`` (``SECONDS`` after each step, ``SECONDS:input`` before each
    batch; none for None)."""
    args: list[str] = []
    if slow_steps:
        number, _, where = slow_steps.partition(":")
        try:
            seconds = float(number)
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds <= 3600 or where not in ("", "input"):
            raise LaunchError(f"{INJECT_SLOW_STEPS}={slow_steps!r}: say a number of seconds from 0 to 3600, then "
                              "optionally :input")
        args += ["--slow-input" if where else "--slow-steps", str(seconds)]
    if not fail:
        return args
    specs = fail.split(",")
    if len({spec.endswith(":once") for spec in specs}) > 1:
        raise LaunchError(f"injected failures {fail!r}: say once for all of them or for none")
    for spec in specs:
        rank, when, *how = spec.split(":")
        epoch, _, step = when.partition(".")
        modes = [h for h in how if h != "once"]
        if len(modes) > 1 or set(modes) - set(HOW):
            raise LaunchError(f"injected failure {spec!r}: say at most one of exit, exit0, kill, signal, then "
                              "optionally once")
        args += ["--fail-rank", rank, "--fail-epoch", epoch, "--fail-step", step or "0", "--fail-how",
                 (modes or ["exit"])[0]] + (["--fail-once"] if "once" in how else [])
    return args


def elastic_slots(ranks: int) -> int:
    """How many one-rank slots this machine offers an elastic run set for ``ranks``: ``ranks``, or fewer where a test
    says so with ``HVDFLOW_ELASTIC_SLOTS``."""
    return min(int(os.environ.get(ELASTIC_SLOTS, ranks)), ranks)
