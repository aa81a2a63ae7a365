"""Progress of a long step: a line at least every ``HVDFLOW_PROGRESS_SECONDS`` (30 by default) while it runs, with
the time so far and what the step can say of itself (bytes pulled, items prepared), so that a log or a terminal
that shows only ``start`` for minutes never leaves the user guessing whether anything happens. On a terminal, the
commands' progress is one line redrawn every second instead."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

PROGRESS_SECONDS_VARIABLE = "HVDFLOW_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30.0
GIB, MIB = 1024 ** 3, 1024 ** 2


def progress_seconds() -> float:
    """How often a long step reports: ``$HVDFLOW_PROGRESS_SECONDS`` (a positive number), else 30."""
    value = os.environ.get(PROGRESS_SECONDS_VARIABLE, "")
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_PROGRESS_SECONDS
    return seconds if seconds > 0 else DEFAULT_PROGRESS_SECONDS


def elapsed_text(seconds: float) -> str:
    """``45 s``, ``3 min 05 s``, ``1 h 02 min``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def size_text(nbytes: int) -> str:
    """Bytes as MiB below 1 GiB, else GiB, one decimal."""
    return f"{nbytes / GIB:.1f} GiB" if nbytes >= GIB else f"{nbytes / MIB:.1f} MiB"


def tree_bytes(folder: Path) -> int:
    """The bytes of the files under ``folder`` now (files that vanish while it is walked are skipped)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def last_line(path: Path) -> str:
    """The last non-empty line of ``path`` (its last 4 KiB read); "" if there is none yet."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def file_size(path: Path) -> int:
    """The bytes in ``path`` now (0 where there is no such file)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def fresh_last_line(path: Path, size_before: int) -> str:
    """:func:`last_line` of ``path`` if it has grown past ``size_before`` (its :func:`file_size` when the step began),
    else "": the progress of a log that may hold only an old run's lines."""
    return last_line(path) if file_size(path) > size_before else ""


class StderrProgress:
    """Progress on stderr: on a terminal one line redrawn in place every second (cut to the terminal's width), ended
    by a newline when the step ends; elsewhere (a log, a pipe, a batch job) plain lines every
    :func:`progress_seconds`."""

    def in_place(self) -> bool:
        """Whether stderr is a terminal."""
        return sys.stderr.isatty()

    def __call__(self, line: str) -> None:
        if self.in_place():
            width = shutil.get_terminal_size().columns
            sys.stderr.write("\r" + line[:max(width - 1, 20)] + "\x1b[K")
            sys.stderr.flush()
        else:
            print(line, file=sys.stderr, flush=True)

    def end(self, drawn: bool) -> None:
        """Leave the terminal's line to what follows (after at least one line was drawn in place)."""
        if drawn and self.in_place():
            sys.stderr.write("\n")
            sys.stderr.flush()


to_stderr = StderrProgress()
"""The writer of a command's progress (``hvdflow image build|push|pull|load|save``)."""


@contextmanager
def heartbeat(write: Callable[[str], None], what: str, detail: Optional[Callable[[], str]] = None,
              every: Optional[float] = None) -> Iterator[None]:
    """While the block runs, ``write`` ``[time] <what>: running for <elapsed>[; <detail()>]`` every ``every``
    seconds (:func:`progress_seconds` by default); nothing once it has ended. A detail that fails is left out."""
    terminal = isinstance(write, StderrProgress) and write.in_place()
    interval = every if every is not None else 1.0 if terminal else progress_seconds()
    started, done, drawn = time.monotonic(), threading.Event(), []

    def beat() -> None:
        while not done.wait(interval):
            line = f"[{time.strftime('%Y-%m-%dT%H:%M:%S')}] {what}: running for {elapsed_text(time.monotonic() - started)}"
            try:
                said = detail() if detail is not None else ""
            except Exception:  # noqa: BLE001 - a progress detail must never fail the step it describes
                said = ""
            if not done.is_set():
                write(f"{line}; {said}" if said else line)
                drawn.append(True)

    thread = threading.Thread(target=beat, name=f"heartbeat {what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if isinstance(write, StderrProgress):
            write.end(bool(drawn))
