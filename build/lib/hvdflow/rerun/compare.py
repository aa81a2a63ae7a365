"""A rerun's record against the recorded one, row by row: the results (weights, final metrics, every epoch's loss)
decide the verdict; the context (image, code, seeds, versions, numerics, CPUs) explains a difference."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

EXIT_IDENTICAL = 0
EXIT_DIFFERS = 3
"""The results differ beyond the tolerance (or the weights differ and the metrics cannot be compared)."""
EXIT_WITHIN_TOLERANCE = 4
"""The weights differ but every final metric agrees within the tolerance (typical across CPUs whose kernels sum in
another order, docs/reproducibility.md)."""
DEFAULT_TOLERANCE = 0.02
"""Largest absolute difference of a final metric that still counts as agreeing, when the weights differ."""
_ABSENT = "-"


@dataclass(frozen=True)
class Row:
    """One line of the comparison."""

    kind: str
    """``result`` (decides the verdict) or ``context`` (explains it)."""
    name: str
    recorded: Any
    rerun: Any
    same: bool


@dataclass(frozen=True)
class Comparison:
    """Every row, the verdict and the exit status that goes with it."""

    rows: list[Row]
    verdict: str
    exit_status: int
    tolerance: float

    def differing(self, kind: Optional[str] = None) -> list[str]:
        """The names of the rows that differ (of ``kind`` only, if given)."""
        return [r.name for r in self.rows if not r.same and (kind is None or r.kind == kind)]

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON (``rerun.json``)."""
        return {"verdict": self.verdict, "exit_status": self.exit_status, "tolerance": self.tolerance,
                "differing_results": self.differing("result"), "differing_context": self.differing("context"),
                "rows": [asdict(r) for r in self.rows]}


def _get(record: Mapping[str, Any], path: str) -> Any:
    value: Any = record
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return _ABSENT
        value = value[key]
    return value


def _row(kind: str, name: str, recorded: Any, rerun: Any) -> Row:
    return Row(kind, name, recorded, rerun, recorded == rerun)


def _result_rows(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Row]:
    rows = [_row("result", "weights_sha256", old["weights_sha256"], new["weights_sha256"])]
    old_hist, new_hist = list(old["history"]), list(new["history"])
    old_final, new_final = (old_hist[-1] if old_hist else {}), (new_hist[-1] if new_hist else {})
    for metric in sorted((set(old_final) | set(new_final)) - {"epoch"}):
        rows.append(_row("result", f"final {metric}", old_final.get(metric, _ABSENT), new_final.get(metric, _ABSENT)))
    for epoch in range(max(len(old_hist), len(new_hist))):
        old_loss = old_hist[epoch].get("loss", _ABSENT) if epoch < len(old_hist) else _ABSENT
        new_loss = new_hist[epoch].get("loss", _ABSENT) if epoch < len(new_hist) else _ABSENT
        rows.append(_row("result", f"loss epoch {epoch + 1}", old_loss, new_loss))
    return rows


def _cpu_rows(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Row]:
    """The CPU models and the union of the instruction-set flags of every host (a host name changes between runs)."""
    def cpus(record: Mapping[str, Any], key: str) -> list[Any]:
        return sorted({str(m.get("cpu", {}).get(key)) for m in record["machines"].values()})

    def flags(record: Mapping[str, Any]) -> set[str]:
        return {f for m in record["machines"].values() for f in m.get("cpu", {}).get("flags") or []}

    old_flags, new_flags = flags(old), flags(new)
    if old_flags == new_flags:
        flag_row = Row("context", "cpu flags", f"{len(old_flags)} flags", f"{len(new_flags)} flags", True)
    else:
        flag_row = Row("context", "cpu flags", f"{len(old_flags)} flags, only here: {' '.join(sorted(old_flags - new_flags))}",
                       f"{len(new_flags)} flags, only here: {' '.join(sorted(new_flags - old_flags))}", False)
    return [_row("context", "cpu model", cpus(old, "model"), cpus(new, "model")), flag_row,
            _row("context", "gpus", [m.get("gpus") for m in old["machines"].values()],
                 [m.get("gpus") for m in new["machines"].values()])]


_CONTEXT = ("image.digest", "image.reference", "code.commit", "code.dirty", "code.diff_sha256", "user_code.tree_sha256",
            "seeds.training", "seeds.split", "runtime", "launcher", "cpu_bind", "proot.sha256", "slurm.allocation")


def _context_rows(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Row]:
    rows = [_row("context", path, _get(old, path), _get(new, path)) for path in _CONTEXT]
    rows += [_row("context", f"versions.{key}", old["versions"].get(key, _ABSENT), new["versions"].get(key, _ABSENT))
             for key in sorted(set(old["versions"]) | set(new["versions"]))]
    rows += [_row("context", f"numerics.{key}", old["numerics"].get(key, _ABSENT), new["numerics"].get(key, _ABSENT))
             for key in sorted(set(old["numerics"]) | set(new["numerics"]))]
    rows.append(_row("context", "ranks", len(old.get("ranks", [])), len(new.get("ranks", []))))
    rows.append(_row("context", "threads per rank", sorted({r.get("threads") for r in old.get("ranks", [])}),
                     sorted({r.get("threads") for r in new.get("ranks", [])})))
    return rows + _cpu_rows(old, new)


def _within(recorded: Any, rerun: Any, tolerance: float) -> bool:
    return (isinstance(recorded, (int, float)) and isinstance(rerun, (int, float))
            and math.isfinite(recorded) and math.isfinite(rerun) and abs(recorded - rerun) <= tolerance)


def compare(old: Mapping[str, Any], new: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE) -> Comparison:
    """The recorded run ``old`` against its rerun ``new``."""
    rows = _result_rows(old, new) + _context_rows(old, new)
    finals = [r for r in rows if r.name.startswith("final ")]
    if all(r.same for r in rows if r.kind == "result"):
        verdict, status = "identical: bit-identical weights and metrics", EXIT_IDENTICAL
    elif finals and all(_within(r.recorded, r.rerun, tolerance) for r in finals):
        if _get(old, "config.experiment.deterministic") is False:  # other weights are expected: the metrics decide
            verdict = (f"agrees within tolerance: every final metric within {tolerance}; the weights may differ, as "
                       f"the run had deterministic: false")
            status = EXIT_IDENTICAL
        else:
            verdict = f"differs within tolerance: other weights, every final metric within {tolerance}"
            status = EXIT_WITHIN_TOLERANCE
    else:
        verdict, status = "differs", EXIT_DIFFERS
    return Comparison(rows=rows, verdict=verdict, exit_status=status, tolerance=tolerance)


def _cell(value: Any, width: int = 40) -> str:
    text = _ABSENT if value is None else str(value)
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        text = value[:16] + "…"
    return text if len(text) <= width else text[: width - 1] + "…"


def table(comparison: Comparison) -> str:
    """The comparison as a text table, the differing rows marked, with the verdict and the rows that differ."""
    name_width = max(len(r.name) for r in comparison.rows)
    lines = [f"{'':2}{'row':<{name_width}}  {'recorded':<40}  {'rerun':<40}"]
    for row in comparison.rows:
        mark = "  " if row.same else "! "
        lines.append(f"{mark}{row.name:<{name_width}}  {_cell(row.recorded):<40}  {_cell(row.rerun):<40}")
    results, context = comparison.differing("result"), comparison.differing("context")
    lines.append(f"verdict: {comparison.verdict} (exit {comparison.exit_status})")
    if results:
        lines.append(f"differing results: {', '.join(results)}")
    if context:
        lines.append(f"differing context: {', '.join(context)}")
    return "\n".join(lines) + "\n"
