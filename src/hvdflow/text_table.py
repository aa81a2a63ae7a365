"""Rows of text as aligned columns for a terminal (the image check's table, ``hvdflow report``'s)."""

from __future__ import annotations

from typing import Optional, Sequence


def aligned(rows: Sequence[Sequence[str]], right_from: Optional[int] = None) -> list[str]:
    """``rows`` as lines of columns two spaces apart, each as wide as its widest cell; cells of the columns from
    ``right_from`` on (numbers) are right-aligned, the others left-aligned. Trailing spaces are cut."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    right = len(widths) if right_from is None else right_from
    return ["  ".join(cell.rjust(width) if k >= right else cell.ljust(width)
                      for k, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows]
