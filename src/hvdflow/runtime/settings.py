"""The profile's ``runtime:`` section, checked: which runtime (``kind``), where the images it runs are kept and
verified (``udocker_dir``: every kind's images come through udocker's store), and the kind's own settings, which
the kind's folder declares, checks and types (:class:`KindOptions`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol


def allow_root_from_env() -> bool:
    """Whether ``HVDFLOW_ALLOW_ROOT=1`` is set: udocker refuses root otherwise."""
    return os.environ.get("HVDFLOW_ALLOW_ROOT") == "1"


DEFAULT_UDOCKER_DIR = "~/.local/share/hvdflow/udocker"
COMMON_SCHEMA: dict[str, Any] = {
    "udocker_dir": {"type": "string", "default": DEFAULT_UDOCKER_DIR,
                    "description": "Every kind. Where the images are pulled or loaded, verified and made into "
                                   "containers (udocker's directory, one per user, on a filesystem every node "
                                   "mounts)."},
}
"""The keys of the section every kind takes besides ``kind``."""


class KindOptions(Protocol):
    """A kind's own settings (``execmode`` and ``proot`` of udocker's, ``venv_dir`` of native's), typed by its
    folder's ``settings`` module."""

    def store_execmode(self) -> Optional[str]:
        """The udocker mode the image store makes this kind's containers in; None: the catalogue's."""
        ...


@dataclass(frozen=True)
class RuntimeSettings:
    """What building a runtime takes: its ``kind``, the image store's folder, the kind's own settings, and whether
    udocker may run as root (``HVDFLOW_ALLOW_ROOT``; never from a profile)."""

    kind: str
    udocker_dir: Path
    options: Any
    """The kind's :class:`KindOptions`."""
    allow_root: bool = field(default_factory=allow_root_from_env)

    @property
    def execmode(self) -> Optional[str]:
        """The udocker mode the store makes the containers in (:meth:`KindOptions.store_execmode`)."""
        mode: Optional[str] = self.options.store_execmode()
        return mode
