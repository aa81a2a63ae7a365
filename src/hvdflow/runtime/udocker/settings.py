"""udocker's keys of the profile's ``runtime:`` section: its execution mode and which proot runs P1 and P2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import expanded
from hvdflow.images.catalog import PROOT_ENGINES
from hvdflow.images.modes import PROFILE_EXECMODES
from hvdflow.images.runc_probe import launcher_refused

SCHEMA: dict[str, Any] = {
    "execmode": {
        "enum": list(PROFILE_EXECMODES),
        "description": "udocker's execution mode: auto (each rank's node runs R1 where it allows user namespaces and "
                       "has runc, else P1; the rank's log and run.json say which), P1, P2 or R1. Default: the "
                       "catalogue's."},
    "proot": {"enum": list(PROOT_ENGINES), "default": "image",
              "description": "Which proot runs P1 and P2: image (the seccomp-accelerated one hvdflow's images carry) "
                             "or host (/usr/bin/proot, Debian's)."},
}
"""udocker's own keys, as JSON schema."""


@dataclass(frozen=True)
class UdockerOptions:
    """udocker's mode (None: the catalogue's) and the proot of its P1/P2 modes (``image`` or ``host``)."""

    execmode: Optional[str] = None
    proot: str = "image"

    def store_execmode(self) -> Optional[str]:
        """The mode the containers are made in: this one."""
        return self.execmode


def _choice(where: str, value: Any, choices: tuple[str, ...]) -> str:
    text = expanded(where, value)
    if text not in choices:
        raise ConfigError(f"{where}: {text!r} is not one of {', '.join(choices)}")
    return text


def udocker_options(where: str, values: Mapping[str, Any], launcher: str) -> UdockerOptions:
    """udocker's keys of the section at ``where``, checked; ConfigError naming the key, or the mode that cannot run
    ``launcher``'s ranks (Open MPI's under R1)."""
    execmode = values.get("execmode")
    if execmode is not None:
        execmode = _choice(f"{where}.execmode", execmode, PROFILE_EXECMODES)
        refused = launcher_refused(execmode, launcher)
        if refused is not None:
            raise ConfigError(f"{where}.execmode: {refused}")
    return UdockerOptions(execmode, _choice(f"{where}.proot", values.get("proot", "image"), PROOT_ENGINES))
