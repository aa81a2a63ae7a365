"""What a runtime is (:class:`Runtime`, the methods launchers and stages use) and what a runtime kind declares to
the registry (:class:`RuntimeKind`: its name, its settings' schema and checker, its builder, its image store, what
the run record says of its engine). A kind's folder (``udocker/``, ``native/``) exports one ``KIND``;
:mod:`hvdflow.runtime.registry` lists them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from hvdflow.findings import Finding
from hvdflow.runtime.record import ContainerRecord
from hvdflow.runtime.settings import KindOptions, RuntimeSettings
from hvdflow.runtime.store import ImageStore
from hvdflow_wire.task import NvidiaSetup


@runtime_checkable
class Runtime(Protocol):
    """Where hvdflow's in-container code runs. Launchers and stages use only these methods, never the kind."""

    @property
    def name(self) -> str:
        """The profile's name of the runtime (``udocker``, ``native``)."""
        ...

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """The command line that runs ``argv`` (starting with ``python3``) with ``env`` set, the host paths ``paths``
        visible at the same place, and with ``hostenv`` the caller's environment passed through (mpirun's)."""
        ...

    def process_env(self) -> dict[str, str]:
        """The environment :meth:`command`'s line itself is started with."""
        ...

    def gpu_setup(self) -> Optional[NvidiaSetup]:
        """What a Slurm task on a GPU node must do before its rank runs so that the rank sees the node's GPUs
        (a value of the task file, done there by :func:`expose_gpus`); None where nothing is needed."""
        ...

    def engine(self) -> dict[str, str]:
        """The engine that runs the commands, for the record."""
        ...

    def refusal(self, launcher: str) -> Optional[str]:
        """Why this runtime cannot run the ranks ``launcher`` starts, naming the way out; None where it can."""
        ...

    def for_launcher(self, launcher: str) -> "Runtime":
        """This runtime as the ranks ``launcher`` starts run in (udocker under ``execmode: auto``: Open MPI's ranks
        in P1 alone); itself where nothing changes."""
        ...


@dataclass(frozen=True)
class RuntimeKind:
    """One runtime the factory knows: how it is built, and what the run record says of its engine (from the settings
    and the image record alone, so that a record is written even where the engine is missing)."""

    name: str
    """The profile's ``runtime.kind``."""
    summary: str
    """What it is, in a few words, for the profile's schema and reference."""
    schema: dict[str, Any]
    """Its own keys of the profile's ``runtime:`` section, as JSON schema (each with a description)."""
    options: Callable[[str, Mapping[str, Any], str], KindOptions]
    """Its keys checked and typed: (where, the section's values of its keys, the profile's launcher) → options;
    ConfigError naming the key."""
    build: Callable[[RuntimeSettings, ContainerRecord, Optional[Path]], Runtime]
    """The runtime running the container of the record (the pull's), with the image catalogue where it needs it."""
    recorded_engine: Callable[[RuntimeSettings, Mapping[str, Any]], Optional[dict[str, Any]]]
    store: Callable[[Path, bool], ImageStore]
    """The store of its images at a folder (whether it may run as root): where the pull step, ``hvdflow image``,
    ``doctor`` and ``rerun`` get and check them. The native runtime's images are checked in udocker too (its venv
    is built from the image's recipe; the image check runs the image itself)."""
    host_checks: Callable[[RuntimeSettings], list[Finding]] = lambda settings: []
    """Its checks of this host for ``hvdflow doctor`` (udocker's: its directory, seccomp, proot); none by default."""
    setup_log: Callable[[RuntimeSettings, str], Optional[Path]] = lambda settings, image: None
    """Where building the runtime for an image logs a set-up that can take minutes (the native venv: Horovod's
    compile), for the step's progress lines; None where it has none (udocker: the pull step did it)."""
