"""Running the external programs of an image build, with the command line in every error."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Mapping, Optional, Sequence

from hvdflow.errors import HvdflowError


class BuildError(HvdflowError):
    """A step of an image build failed."""


def run_step(argv: Sequence[str], log: Path, env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None) -> None:
    """Run ``argv``, appending its output to ``log``; raise BuildError with the log's tail if it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(argv)}\n")
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildError(f"{shlex.join(argv)} failed with exit code {proc.returncode} (log: {log}):\n{tail}")
