"""The files between the Slurm launcher on the job's first node and the rank tasks (``hvdflow.slurm.rank_task``) in
the run's log directory.

- ``rendezvous.json`` (launcher → rank tasks, written before the training step): :class:`Rendezvous`, where the Gloo
  rendezvous server listens.
- ``rank-<r>.failed.json`` (rank task → launcher): :class:`RankFailed`, a rank that exited non-zero, was killed, or
  exited 0 without its result; the launcher names the one that failed first.
- ``rank-<r>.stopped.json`` (rank task → launcher): :class:`RankStopped`, a rank that stopped on a signal after a
  checkpoint (the stopped exit status).

Each is written whole (a temporary file, then renamed) as indented, key-sorted JSON ending in a newline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar, Type, TypeVar

from .values import from_json, read_object, to_json, write_object

M = TypeVar("M", bound="RankMarker")


@dataclass(frozen=True)
class Rendezvous:
    """``rendezvous.json``: the address and port of the Gloo rendezvous server, and the host it runs on."""

    addr: str
    port: int
    host: str

    def write(self, path: str) -> None:
        """Write ``rendezvous.json`` atomically."""
        write_object(str(path), to_json(self), end="\n")

    @classmethod
    def read(cls, path: str) -> "Rendezvous":
        """The rendezvous the launcher wrote; WireError naming the file and what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))


class RankMarker:
    """What the rank task's markers share: the file ``rank-<r>.<KIND>.json`` in the run's log directory, written whole
    by the rank task and read by the launcher (subclasses are frozen dataclasses with a ``rank`` field)."""

    KIND: ClassVar[str] = ""
    rank: int

    @classmethod
    def glob(cls) -> str:
        """The pattern of every rank's marker of this kind."""
        return "rank-*.%s.json" % cls.KIND

    @classmethod
    def path(cls, logs: str, rank: int) -> str:
        """Where rank ``rank``'s marker goes in the log directory ``logs``."""
        return os.path.join(str(logs), "rank-%d.%s.json" % (rank, cls.KIND))

    def write(self, logs: str) -> None:
        """Write the marker into the log directory ``logs`` atomically."""
        write_object(self.path(logs, self.rank), to_json(self), end="\n")

    @classmethod
    def read(cls: Type[M], path: str) -> M:
        """The marker at ``path``; WireError naming the file and what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))


@dataclass(frozen=True)
class RankStopped(RankMarker):
    """``rank-<r>.stopped.json``: rank ``rank`` stopped on a signal after a checkpoint, on ``host`` at ``unix``."""

    KIND: ClassVar[str] = "stopped"
    rank: int
    host: str
    unix: float


@dataclass(frozen=True)
class RankFailed(RankMarker):
    """``rank-<r>.failed.json``: rank ``rank`` failed on ``host`` at ``unix``, for ``reason`` (an exit code, a signal,
    or no result despite status 0)."""

    KIND: ClassVar[str] = "failed"
    rank: int
    host: str
    unix: float
    reason: str
