"""Training under Horovod's elastic API, whatever the framework: ranks may leave or join at run time, state rolls
back to the last epoch's end.

The state Horovod keeps in memory and broadcasts from rank 0 after every change is the framework's (Keras'
``KerasState``, torch's ``TorchState``: the model and the optimizer) with the position (epochs done, steps into the
next: non-zero only when resuming a checkpoint saved mid-epoch), the history and a half-done epoch's metric sums. It
is committed only at an epoch's end, so a failure mid-epoch rolls every rank back to the same, deterministic point;
a host that joins is taken in at the next commit. After each change the data shards, the per-rank batch (the global
batch divided by the new count), the steps per epoch and the loop's per-membership parts are built again
(``make_layout``). Rank 0 appends to ``membership`` (JSON lines) each membership (epoch, step, ranks, hosts, its
worker) and each epoch's end (ranks, samples, seconds), which the launcher turns into the run's timeline.

The framework gives its part of Horovod's elastic API (:class:`ElasticApi`: its state class, ``elastic.run``
decorator and ``allgather_object``); the rest is here, the choice between a fixed and an elastic run included
(:func:`train_all_epochs`).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from hvdflow_wire.elastic import EpochEnd, Membership, MembershipAppender

from .run_control import Position


class EpochCommit:
    """Called after every epoch of one membership: rank 0 notes the epoch's samples and seconds, and every rank
    commits the state (position, history, no half-done epoch's sums) to Horovod's elastic state."""

    def __init__(self, state, layout, membership: str) -> None:  # type: ignore[no-untyped-def]
        self.state, self.layout, self.membership = state, layout, membership
        self.began = time.time()

    def __call__(self, position: Position, history: List[Dict[str, float]]) -> None:
        now = time.time()
        if self.layout.rank == 0:  # the epoch's samples and wall time: the throughput of this membership
            MembershipAppender(self.membership).append(
                EpochEnd(epoch=position.epoch, ranks=self.layout.size,
                         samples=self.layout.train_per_rank * self.layout.size, seconds=round(now - self.began, 4),
                         unix=now))
        state = self.state
        state.epoch, state.step, state.history, state.metric_sums = position.epoch, 0, list(history), None
        state.commit()
        self.began = time.time()


def membership_runner(elastic_run: Callable, allgather_object: Callable) -> Callable:  # type: ignore[type-arg]
    """One membership's training under Horovod's elastic wrapper ``elastic_run`` (which calls it again after every
    change): the layout of the current ranks, the membership noted, then ``fit_epochs``; ``last`` keeps the
    membership's layout, position and history."""

    @elastic_run
    def run_membership(state, make_layout: Callable, fit_epochs: Callable, checkpoints,  # type: ignore[no-untyped-def]
                       membership: str, last: Dict[str, object]) -> None:
        layout = make_layout()
        checkpoints.follow(layout.rank, layout.size)
        hosts = allgather_object(os.environ.get("HOROVOD_HOSTNAME", socket.gethostname()), name="hvdflow_membership")
        current, done = Position(state.epoch, state.step), list(state.history)
        last.update(layout=layout, position=current, history=done)
        if layout.rank == 0:
            MembershipAppender(membership).append(
                Membership(epoch=current.epoch, step=current.step, ranks=layout.size, hosts=list(hosts),
                           unix=time.time(), worker=os.environ.get("HVDFLOW_ELASTIC_WORKER")))
            print("hvdflow: elastic: %d ranks on %s from epoch %d step %d"
                  % (layout.size, ", ".join(sorted(set(hosts))), current.epoch, current.step), flush=True)
        carried = state.metric_sums if current.step else None
        if carried is not None and len(carried) != layout.size:
            raise RuntimeError("the checkpoint at epoch %d step %d was saved by %d ranks and %d run now: a checkpoint "
                               "saved mid-epoch resumes only with the same rank count"
                               % (current.epoch, current.step, len(carried), layout.size))
        fit_epochs(layout, current, done, carried, EpochCommit(state, layout, membership))

    return run_membership


def elastic_fit(state, elastic_run: Callable, allgather_object: Callable, checkpoints,  # type: ignore[no-untyped-def,type-arg]
                make_layout: Callable, fit_epochs: Callable, membership: str) -> Tuple[Any, Position, List[Dict[str, float]]]:  # type: ignore[type-arg]
    """Train to the last epoch under the framework's ``elastic_run``; ``(layout, position, history)`` of the last
    membership.

    ``state``: the framework's elastic state with ``epoch``, ``step``, ``history`` and ``metric_sums``.
    ``fit_epochs(layout, position, history, carried_sums, committed)`` trains and calls ``committed(position,
    history)`` after every epoch. If Horovod's wrapper swallows an error that is not its own, this returns with the
    position short of the last epoch: the caller checks.
    """
    last: Dict[str, object] = {}
    membership_runner(elastic_run, allgather_object)(state, make_layout, fit_epochs, checkpoints, membership, last)
    if not last:
        raise RuntimeError("elastic training returned before its first epoch began")
    return last["layout"], last["position"], last["history"]


class ElasticApi(NamedTuple):
    """A framework's part of Horovod's elastic API."""

    state: Callable  # type: ignore[type-arg]
    """Makes the elastic state from ``epoch``, ``step``, ``history`` and ``metric_sums`` (the framework's state class
    with its model and optimizer bound)."""
    run: Callable  # type: ignore[type-arg]
    """Horovod's ``elastic.run`` decorator of the framework's API."""
    allgather_object: Callable  # type: ignore[type-arg]


def train_all_epochs(epochs: int, make_layout: Callable, fit_epochs: Callable, position: Position,  # type: ignore[type-arg]
                     history: List[Dict[str, float]], metric_sums: Optional[List[List[float]]], checkpoints,  # type: ignore[no-untyped-def]
                     membership: str, elastic: Optional[ElasticApi]) -> Tuple[Any, Position, List[Dict[str, float]]]:
    """Train from ``position`` to epoch ``epochs`` with the ranks there are (``elastic`` None) or under Horovod's
    elastic API; ``(layout, position, history)`` of the last membership. RuntimeError if training returned short of
    the last epoch (Horovod's elastic wrapper returns quietly from errors it does not know)."""
    if elastic is None:
        layout = make_layout()
        fit_epochs(layout, position, history, metric_sums)
    else:
        state = elastic.state(epoch=position.epoch, step=position.step, history=list(history), metric_sums=metric_sums)
        layout, position, history = elastic_fit(state, elastic.run, elastic.allgather_object, checkpoints,
                                                make_layout, fit_epochs, membership)
    if position.epoch < epochs:
        raise RuntimeError("training returned after %d of %d epochs" % (position.epoch, epochs))
    return layout, position, history
