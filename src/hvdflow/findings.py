"""One check's result, ok, warning or failure with the sentence that mends it: what ``hvdflow doctor`` shows, and
what a runtime kind's own checks of this host return (:attr:`hvdflow.runtime.kind.RuntimeKind.host_checks`), so
that the checks of a runtime live in its folder. Floor 0: the standard library only."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
