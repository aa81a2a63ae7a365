"""One finding of ``hvdflow doctor``, and how the findings are shown: a table for people, JSON for tickets."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

OK, WARNING, FAILURE = "ok", "warning", "failure"
STATUSES = (OK, WARNING, FAILURE)


@dataclass(frozen=True)
class Finding:
    """What one check found: ``status`` one of :data:`STATUSES`, ``detail`` what was seen (versions, paths, sizes),
    ``fix`` one sentence that mends a warning or a failure ("" when ok)."""

    check: str
    status: str
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"finding {self.check}: status {self.status!r} is not one of {STATUSES}")

    def as_json(self) -> dict[str, str]:
        """The finding as a JSON object."""
        return asdict(self)


def ok(check: str, detail: str) -> Finding:
    """A check that passed."""
    return Finding(check, OK, detail)


def warning(check: str, detail: str, fix: str) -> Finding:
    """A check whose result works but costs speed or safety."""
    return Finding(check, WARNING, detail, fix)


def failure(check: str, detail: str, fix: str) -> Finding:
    """A check whose result stops runs."""
    return Finding(check, FAILURE, detail, fix)


def exit_status(findings: Iterable[Finding]) -> int:
    """1 if any finding is a failure, else 0 (warnings do not fail)."""
    return 1 if any(f.status == FAILURE for f in findings) else 0


CHECK_WIDTH = 27
"""The check names' column: as wide as the longest (``node sees udocker directory``), so that findings printed one by
one, as they are made, line up."""


def render_finding(finding: Finding, width: int = CHECK_WIDTH) -> str:
    """One finding's line, and its fix on the line below for a failure or a warning."""
    line = f"{finding.status.upper():<8} {finding.check:<{width}}  {finding.detail}"
    return line + (f"\n{'':<8} {'':<{width}}  fix: {finding.fix}" if finding.fix else "")


def render_counts(findings: Sequence[Finding]) -> str:
    """The last line: how many findings of each status."""
    counts = {status: sum(f.status == status for f in findings) for status in STATUSES}
    return f"{counts[OK]} ok, {counts[WARNING]} warnings, {counts[FAILURE]} failures"


def render_text(findings: Sequence[Finding]) -> str:
    """The findings as aligned lines, each failure's and warning's fix on the line below, and a count at the end."""
    width = max((len(f.check) for f in findings), default=0)
    return "\n".join([*(render_finding(f, width) for f in findings), render_counts(findings)])


def render_json(findings: Sequence[Finding], about: Mapping[str, Any]) -> str:
    """The findings and ``about`` (host, profile, hvdflow's revision) as one JSON document, for a support ticket."""
    return json.dumps({**about, "findings": [f.as_json() for f in findings],
                       "exit_status": exit_status(findings)}, indent=2)
