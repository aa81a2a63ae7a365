"""What the runtime factory needs to know to build a runtime: the profile's choices (or the command line's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from hvdflow.config.profile import ClusterProfile
from hvdflow.images.udocker import allow_root_from_env


@dataclass(frozen=True)
class RuntimeSettings:
    """Which runtime (``kind``: the profile's ``runtime``) and what building it takes: the proot of udocker's P1/P2
    modes, where native venvs live and the catalogue that names an image's recipe, whether udocker may run as root."""

    kind: str
    proot: str = "image"
    native_venv_dir: Optional[Path] = None
    catalog: Optional[Path] = None
    allow_root: bool = field(default_factory=allow_root_from_env)

    @classmethod
    def of_profile(cls, profile: ClusterProfile, catalog: Path) -> RuntimeSettings:
        """The runtime ``profile`` asks for, with the images of ``catalog``."""
        return cls(profile.runtime, profile.proot, profile.native_venv_dir, catalog)
