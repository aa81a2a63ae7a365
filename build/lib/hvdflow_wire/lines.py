"""JSON lines between processes: one process appends whole lines, another reads the lines complete so far.

A writer appends each record as one line in one write, flushed. A reader may look while a line is being written:
it takes only the lines that end in a newline, and keeps the rest for its next look. A complete line that is not a
valid record is a :class:`~hvdflow_wire.values.WireError` naming the file and the line's number; blank lines are
skipped.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Generic, List, Mapping, TypeVar

from .values import WireError, parse_object, to_json

R = TypeVar("R")


class LineAppender(Generic[R]):
    """Appends records (wire values) to the JSON-lines file ``path``, one line each."""

    def __init__(self, path: str) -> None:
        self.path = str(path)

    def append(self, record: R) -> None:
        """One line for ``record`` (key-sorted JSON), written and flushed at once: a reader sees whole lines."""
        with open(self.path, "a") as handle:
            handle.write(json.dumps(to_json(record), sort_keys=True) + "\n")
            handle.flush()


class LineReader(Generic[R]):
    """Reads the JSON-lines file ``path`` as another process appends to it: each call of :meth:`new` returns the
    records of the lines completed since the last call (none while the file does not exist)."""

    def __init__(self, path: str, parse: Callable[[Mapping[str, Any], str], R]) -> None:
        self.path = str(path)
        self.parse = parse
        self.read_to = 0
        self.line = 0
        self.partial = b""

    def new(self) -> List[R]:
        """The records of the complete lines written since the last call; WireError for a malformed line."""
        if not os.path.exists(self.path):
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.read_to)
            data = handle.read()
        self.read_to += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        records = []
        for raw in lines:
            self.line += 1
            if raw.strip():
                where = "%s line %d" % (self.path, self.line)
                try:
                    text = raw.decode()
                except UnicodeDecodeError as exc:
                    raise WireError("%s is not UTF-8 (%s)" % (where, exc)) from None
                records.append(self.parse(parse_object(text, where), where))
        return records
