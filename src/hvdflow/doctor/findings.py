"""One finding of ``hvdflow doctor``, and how the findings are shown: a table for people, JSON for tickets."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from hvdflow.findings import FAILURE, OK, STATUSES, WARNING, Finding, failure, ok, warning

__all__ = ["FAILURE", "OK", "STATUSES", "WARNING", "Finding", "exit_status", "failure", "ok", "render_counts", "render_text",
           "render_finding", "render_json", "warning"]

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
