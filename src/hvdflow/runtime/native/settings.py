"""The native runtime's key of the profile's ``runtime:`` section: where its venvs are built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.files.yamlfile import expanded

DEFAULT_VENV_DIR = "~/.cache/hvdflow/native"
SCHEMA: dict[str, Any] = {
    "venv_dir": {"type": "string", "default": DEFAULT_VENV_DIR,
                 "description": "Where the native runtime builds its venvs (the image's pinned packages and Horovod "
                                "wheel on the host's Python)."},
}
"""native's own keys, as JSON schema."""


@dataclass(frozen=True)
class NativeOptions:
    """Where the native venvs are built."""

    venv_dir: Path = field(default_factory=lambda: Path(DEFAULT_VENV_DIR).expanduser())

    def store_execmode(self) -> Optional[str]:
        """None: the images are checked in the catalogue's mode (the venv runs the ranks)."""
        return None


def native_options(where: str, values: Mapping[str, Any], launcher: str) -> NativeOptions:
    """native's keys of the section at ``where``, checked (it runs every launcher's ranks)."""
    return NativeOptions(Path(expanded(f"{where}.venv_dir", values.get("venv_dir", DEFAULT_VENV_DIR))))
