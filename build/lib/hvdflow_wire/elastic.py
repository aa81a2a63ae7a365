"""The files of an elastic run, in ``<logs>/elastic/`` (the channel) and ``<logs>/``.

Between hvdflow's launcher on the host and Horovod's driver in the image (``hvdflow_trainer.elastic_driver``):

- ``hosts.json`` (launcher → driver, replaced atomically): :class:`Hosts`, ``{host: slots}`` that may run a worker now.
- ``requests.jsonl`` (driver → launcher, appended): :class:`StartWorker` (a worker for a Horovod slot, with its
  environment) or :class:`StopWorker` (the driver gave a worker up).
- ``exits.jsonl`` (launcher → driver, appended): :class:`WorkerExit`, a worker has gone.
- ``result.json`` (driver, last): :class:`DriverResult`, the final workers' exit codes and Horovod's error.

Between rank 0 of the trainer and the launcher: ``membership.jsonl`` (appended), each :class:`Membership` and each
:class:`EpochEnd`. The launcher's own record of the run, read for the run record: ``events.jsonl``, :class:`Event`.
Each JSON-lines file has one appender and one reader class here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple, Union

from .lines import LineAppender, LineReader
from .placement import Placement
from .values import WireError, from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class Hosts:
    """``hosts.json``: the hosts that may run workers now and their slots."""

    REST: ClassVar[str] = "slots"
    slots: Dict[str, int]

    def write(self, path: str) -> None:
        """Replace ``hosts.json`` atomically (the driver reads it every second)."""
        write_object(str(path), to_json(self))

    @classmethod
    def read(cls, path: str) -> "Hosts":
        """The hosts the launcher last wrote; WireError naming what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))


@dataclass(frozen=True)
class Slot(Placement):
    """A Horovod slot (``SlotInfo``): where a worker runs and its ranks."""


@dataclass(frozen=True)
class StartWorker:
    """Start worker ``worker`` for ``slot`` with Horovod's variables ``env``."""

    JSON_KEYS: ClassVar[Dict[str, str]] = {"worker": "start"}
    worker: int
    slot: Slot
    env: Dict[str, str]


@dataclass(frozen=True)
class StopWorker:
    """Stop worker ``worker`` (the driver gave it up: its host was removed or blacklisted, or the job ends)."""

    JSON_KEYS: ClassVar[Dict[str, str]] = {"worker": "stop"}
    worker: int


Request = Union[StartWorker, StopWorker]


def parse_request(data: Mapping[str, Any], where: str) -> Request:
    """A line of ``requests.jsonl``: a start or a stop."""
    if "start" in data:
        return from_json(StartWorker, data, where)
    if "stop" in data:
        return from_json(StopWorker, data, where)
    raise WireError("%s: neither start nor stop" % where)


class RequestAppender(LineAppender[Request]):
    """The driver's side of ``requests.jsonl``."""


class RequestReader(LineReader[Request]):
    """The launcher's side of ``requests.jsonl``: the requests written since the last call of :meth:`new`."""

    def __init__(self, path: str) -> None:
        super().__init__(path, parse_request)


@dataclass(frozen=True)
class WorkerExit:
    """Worker ``worker`` has gone with status ``code`` at ``unix`` (whole seconds)."""

    JSON_KEYS: ClassVar[Dict[str, str]] = {"worker": "id"}
    worker: int
    code: int
    unix: int


class ExitAppender(LineAppender[WorkerExit]):
    """The launcher's side of ``exits.jsonl``."""


class ExitReader(LineReader[WorkerExit]):
    """The driver's side of ``exits.jsonl``: the exits written since the last call of :meth:`new`."""

    def __init__(self, path: str) -> None:
        super().__init__(path, lambda data, where: from_json(WorkerExit, data, where))


@dataclass(frozen=True)
class WorkerResult:
    """How one worker of the final rendezvous ended."""

    code: int
    unix: float


@dataclass(frozen=True)
class DriverResult:
    """``result.json``: the final rendezvous' workers (by Horovod's name), Horovod's error, and whether the run
    succeeded (no error, and every worker exited 0)."""

    error: Optional[str]
    workers: Dict[str, WorkerResult]
    ok: bool

    def write(self, path: str) -> None:
        """Write ``result.json`` atomically, the driver's last act."""
        write_object(str(path), to_json(self))

    @classmethod
    def read(cls, path: str) -> "DriverResult":
        """The driver's result; WireError naming what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))


@dataclass(frozen=True)
class Membership:
    """A membership began: ``ranks`` ranks on ``hosts`` from ``epoch`` and ``step``, its rank 0 the launcher's
    worker ``worker`` (None outside the launcher's workers)."""

    TAG: ClassVar[Tuple[str, str]] = ("kind", "membership")
    epoch: int
    step: int
    ranks: int
    hosts: List[str]
    unix: float
    worker: Optional[str]


@dataclass(frozen=True)
class EpochEnd:
    """Epoch ``epoch`` ended with ``ranks`` ranks, ``samples`` trained in ``seconds``."""

    TAG: ClassVar[Tuple[str, str]] = ("kind", "epoch")
    epoch: int
    ranks: int
    samples: int
    seconds: float
    unix: float


MembershipLine = Union[Membership, EpochEnd]


def parse_membership_line(data: Mapping[str, Any], where: str) -> MembershipLine:
    """A line of ``membership.jsonl``: by its ``kind``, a membership or an epoch's end."""
    if data.get("kind") == "membership":
        return from_json(Membership, data, where)
    if data.get("kind") == "epoch":
        return from_json(EpochEnd, data, where)
    raise WireError("%s: kind is %s, expected \"membership\" or \"epoch\"" % (where, json.dumps(data.get("kind"))))


class MembershipAppender(LineAppender[MembershipLine]):
    """Rank 0's side of ``membership.jsonl``."""


class MembershipReader(LineReader[MembershipLine]):
    """The launcher's side of ``membership.jsonl``: the lines rank 0 wrote since the last call of :meth:`new`."""

    def __init__(self, path: str) -> None:
        super().__init__(path, parse_membership_line)


@dataclass(frozen=True)
class Event:
    """One line of the launcher's ``events.jsonl``: what happened (``event``: hosts, start, exit, membership,
    epoch) at ``unix``, and its facts (kept as JSON, each at the top level of the line)."""

    REST: ClassVar[str] = "facts"
    unix: float
    event: str
    facts: Dict[str, Any]

    def to_json(self) -> Dict[str, Any]:
        """The event as one JSON object: ``unix``, ``event`` and the facts."""
        return to_json(self)  # type: ignore[no-any-return]


class EventAppender(LineAppender[Event]):
    """The launcher's side of ``events.jsonl`` while it runs."""


class EventReader(LineReader[Event]):
    """``events.jsonl`` read back (for the run record)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, lambda data, where: from_json(Event, data, where))
