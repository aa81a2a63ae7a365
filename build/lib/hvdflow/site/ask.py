"""Questions ``hvdflow site new`` asks where there is a real choice: on a terminal, the options numbered with the
default marked; without one, or with ``--yes``, the default is taken and said, and nothing is read."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from hvdflow.errors import HvdflowError


@dataclass(frozen=True)
class Option:
    """One answer: the value written into the profile and what the user is told of it."""

    value: str
    said: str


class Asker:
    """Asks on a terminal (``interactive``), else takes each default; ``read`` and ``write`` are the terminal's."""

    def __init__(self, interactive: bool, read: Callable[[str], str] = input,
                 write: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)) -> None:
        self.interactive = interactive
        self._read = read
        self._write = write

    def choose(self, what: str, options: Sequence[Option], default: str, flag: str) -> str:
        """One of ``options``' values for ``what``: the user's on a terminal (Enter: ``default``), else ``default``,
        said with the flag that sets it."""
        if len(options) == 1 or not self.interactive:
            chosen = next(o for o in options if o.value == default)
            self._write(f"hvdflow site new: {what}: {chosen.value} ({chosen.said}; {flag} sets another)")
            return chosen.value
        self._write(f"{what}:")
        for number, option in enumerate(options, 1):
            mark = "  [default]" if option.value == default else ""
            self._write(f"  {number}) {option.value}: {option.said}{mark}")
        for _ in range(3):
            answer = self._read(f"{what} [1-{len(options)}, Enter for {default}]: ").strip()
            if not answer:
                return default
            if answer.isdigit() and 1 <= int(answer) <= len(options):
                return options[int(answer) - 1].value
            if any(o.value == answer for o in options):
                return answer
            self._write(f"  {answer!r} is none of them: a number from 1 to {len(options)}, or a name")
        raise HvdflowError(f"{what}: no answer among the options after three tries; pass {flag}")
