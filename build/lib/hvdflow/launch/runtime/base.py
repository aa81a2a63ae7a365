"""What a runtime is (:class:`Runtime`) and the one factory that builds the runtime a profile asks for, and the
store its images come from (:class:`~hvdflow.launch.runtime.store.ImageStore`).

A new runtime is one module beside this one (its class, its builder, its image store, what the run record says of
its engine) and one line in :data:`KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from hvdflow.config.profile import ClusterProfile
from hvdflow.errors import ConfigError
from hvdflow.images.pull import ContainerRecord, container_in_mode
from hvdflow.images.udocker import allow_root_from_env
from hvdflow.launch.runtime.native import native_recorded_engine, native_runtime, native_setup_log
from hvdflow.launch.runtime.settings import RuntimeSettings
from hvdflow.launch.runtime.store import ImageStore
from hvdflow.launch.runtime.udocker import expose_gpus as udocker_expose_gpus
from hvdflow.launch.runtime.udocker import udocker_recorded_engine, udocker_runtime
from hvdflow.launch.runtime.udocker_store import udocker_store
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

    build: Callable[[RuntimeSettings, ContainerRecord], Runtime]
    recorded_engine: Callable[[RuntimeSettings, Mapping[str, Any]], Optional[dict[str, Any]]]
    store: Callable[[Path, bool], ImageStore]
    """The store of its images at a folder (whether it may run as root): where the pull step, ``hvdflow image``,
    ``doctor`` and ``rerun`` get and check them. The native runtime's images are checked in udocker too (its venv
    is built from the image's recipe; the image check runs the image itself)."""
    setup_log: Callable[[RuntimeSettings, str], Optional[Path]] = lambda settings, image: None
    """Where building the runtime for an image logs a set-up that can take minutes (the native venv: Horovod's
    compile), for the step's progress lines; None where it has none (udocker: the pull step did it)."""


KINDS: dict[str, RuntimeKind] = {
    "udocker": RuntimeKind(udocker_runtime, udocker_recorded_engine, udocker_store),
    "native": RuntimeKind(native_runtime, native_recorded_engine, udocker_store, native_setup_log),
}
"""The one list of runtimes: the profile's name → how it is built and recorded (one line per runtime)."""


def kind_of(kind: str) -> RuntimeKind:
    """The runtime named ``kind``; ConfigError naming the known ones if none."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ConfigError(f"unknown runtime {kind!r}; choose one of {', '.join(KINDS)}") from None


def image_store(kind: str, location: Path, allow_root: Optional[bool] = None) -> ImageStore:
    """The image store of runtime ``kind`` at ``location`` (may it run as root: ``HVDFLOW_ALLOW_ROOT`` unless said);
    ConfigError naming the known runtimes for an unknown kind."""
    return kind_of(kind).store(location, allow_root_from_env() if allow_root is None else allow_root)


def image_store_of(profile: ClusterProfile) -> ImageStore:
    """The image store of the runtime ``profile`` names, at its folder."""
    return image_store(profile.runtime, profile.udocker_dir)


def setup_log(settings: RuntimeSettings, image: str) -> Optional[Path]:
    """The log of the runtime's own set-up for ``image`` (:attr:`RuntimeKind.setup_log`), or None."""
    return kind_of(settings.kind).setup_log(settings, image)


def make_runtime(settings: RuntimeSettings, record: ContainerRecord) -> Runtime:
    """The runtime ``settings`` asks for, running the image of ``record`` (the pull's container record)."""
    return kind_of(settings.kind).build(settings, record)


def runtime_for(profile: ClusterProfile, image_record: Path, catalog: Path, execmode: Optional[str] = None) -> Runtime:
    """The runtime the profile asks for, with the image the record (a file the pull wrote) names; with ``execmode``,
    udocker's container of that mode (:func:`~hvdflow.images.pull.container_in_mode`)."""
    record = ContainerRecord.read(image_record)
    if execmode is not None:
        record = container_in_mode(record, execmode)
    return make_runtime(RuntimeSettings.of_profile(profile, catalog), record)


def recorded_engine(settings: RuntimeSettings, image: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """What the run record says of the engine of the runtime ``settings`` names, for the image record ``image``."""
    return kind_of(settings.kind).recorded_engine(settings, image)


def expose_gpus(setup: NvidiaSetup) -> str:
    """Do on this node what a runtime's :meth:`Runtime.gpu_setup` asked for; a note for the rank's log. Only the
    udocker runtime asks for anything (``udocker setup --nvidia`` of its container)."""
    return udocker_expose_gpus(setup)
