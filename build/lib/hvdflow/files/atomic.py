"""Writing files so that a reader sees the old content or the whole new one, never a half-written file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hvdflow_wire.replace import replaced


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary sibling and rename it over ``path``."""
    with replaced(str(path)) as handle:
        handle.write(text)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON, atomically."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
