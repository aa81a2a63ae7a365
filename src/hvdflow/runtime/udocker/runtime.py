"""The udocker runtime: commands run with ``udocker run`` in the image's created container."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from hvdflow.code_location import with_this_hvdflow
from hvdflow.errors import UdockerError
from hvdflow.files.cache import sha256_file
from hvdflow.files.filelock import exclusive_lock
from hvdflow.images.execmode_choice import MODE_ENV, chooser_argv
from hvdflow.images.modes import AUTO_FALLBACK_MODE, AUTO_MODE, AUTO_RUNC_MODE, RUNC_MODES
from hvdflow.images.runc_probe import launcher_refused
from hvdflow.images.udocker_tools import engine_binary
from hvdflow.runtime.packages import CONTAINER_PACKAGES, NUMERICS_ENV, TRAINER_MOUNT, package_dir
from hvdflow.runtime.record import NO_RUNC_CONTAINER, ContainerRecord
from hvdflow.runtime.settings import RuntimeSettings, allow_root_from_env
from hvdflow.runtime.udocker.client import Udocker, output_tail, run_argv
from hvdflow_wire.task import NvidiaSetup

NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
LAST_EXIT = ("python3", "-S", "-m", "hvdflow_trainer.last_exit", "--")
"""What every command in the container runs under, so that udocker's exit status is the command's own."""


@dataclass(frozen=True)
class UdockerRuntime:
    """Commands run with ``udocker run`` in a created container, the in-container packages bound at /opt/hvdflow."""

    udocker: Udocker
    container: str
    execmode: str = "P1"
    """udocker's mode of the container (its record's): proot (P1, P2), rootless runc (R1), or ``auto``: R1's
    container on each node that can run it, else ``container`` in P1."""
    runc_container: Optional[str] = None
    """Under ``auto``: the R1 container beside ``container``, where it was made."""
    runc_refused: Optional[str] = None
    """Under ``auto``: why these ranks are offered P1 alone (:meth:`for_launcher`), or None."""
    name: str = "udocker"

    def command(self, argv: Sequence[str], env: Mapping[str, str], paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """``argv`` (starting with ``python3``) in the container, ``paths`` bound at the same place, run under
        :mod:`hvdflow_trainer.last_exit` (:data:`LAST_EXIT`): proot exits with the status of the last process to
        exit, and that wrapper makes it the command's own. Where a runc mode may run it, the mode is chosen on the
        node the command starts on (:mod:`hvdflow.images.execmode_choice`); the command sees its mode in
        :data:`MODE_ENV`."""
        containers, no_runc = self.containers()
        self._make_mountpoints(containers.values(), [*paths, *(Path(TRAINER_MOUNT) / name for name in CONTAINER_PACKAGES)])
        volumes = [str(p) for p in paths] + [f"{package_dir(name)}:{TRAINER_MOUNT}/{name}" for name in CONTAINER_PACKAGES]
        if hostenv:
            volumes.append("/tmp")  # Open MPI's session directory, where the ranks find the host's PMIx server
        chosen = {name: os.environ[name] for name in NUMERICS_ENV if name in os.environ}
        full_env = {"PYTHONPATH": TRAINER_MOUNT, "PYTHONUNBUFFERED": "1", **chosen, **env}
        runs = {mode: run_argv(self.udocker, container, [*LAST_EXIT, *argv], env={**full_env, MODE_ENV: mode},
                               volumes=volumes, hostenv=hostenv, as_user=mode not in RUNC_MODES)
                for mode, container in containers.items()}
        if self.execmode in RUNC_MODES or self.execmode == AUTO_MODE:
            return chooser_argv(runs, no_runc)
        return runs[self.execmode]

    def containers(self) -> tuple[dict[str, str], Optional[str]]:
        """The modes a command may run in and their containers, and why ``auto`` offers no runc mode (None where it
        does): the one mode and container of an explicit mode; under ``auto`` R1's and P1's, or P1's alone where the
        launcher's ranks cannot run R1 (:attr:`runc_refused`) or no R1 container was made."""
        if self.execmode != AUTO_MODE:
            return {self.execmode: self.container}, None
        if self.runc_refused is not None:
            return {AUTO_FALLBACK_MODE: self.container}, self.runc_refused
        if self.runc_container is None:
            return {AUTO_FALLBACK_MODE: self.container}, NO_RUNC_CONTAINER
        return {AUTO_RUNC_MODE: self.runc_container, AUTO_FALLBACK_MODE: self.container}, None

    def _make_mountpoints(self, containers: Iterable[str], targets: Sequence[Path]) -> None:
        """Create the bind targets inside the containers' roots before any run starts.

        Otherwise proot resolves them through temporary "glue" directories, and a concurrent ``udocker run`` that
        creates part of the path in the root changes what the others see: a rank then failed to write its result
        (ENOENT) in about one MPI run in five.
        """
        for container in containers:
            root = self.udocker.udocker_dir / "containers" / container / "ROOT"
            for target in targets:
                (root / str(target).lstrip("/")).mkdir(parents=True, exist_ok=True)

    def process_env(self) -> dict[str, str]:
        """The environment the command itself is started with: udocker's, with this hvdflow first on PYTHONPATH for
        the mode chooser."""
        return with_this_hvdflow(self.udocker.env())

    def gpu_setup(self) -> Optional[NvidiaSetup]:
        """What a task on a GPU node does before its rank runs: ``udocker setup --nvidia`` of this container
        (:func:`expose_gpus`)."""
        return NvidiaSetup(str(self.udocker.udocker_dir), list(self.containers()[0].values()))

    def refusal(self, launcher: str) -> Optional[str]:
        """Why the container's mode cannot run the ranks of ``launcher`` (Open MPI's under R1); None where it can."""
        return launcher_refused(self.execmode, launcher)

    def for_launcher(self, launcher: str) -> "UdockerRuntime":
        """Under ``auto``, Open MPI's ranks get P1's container alone (from runc's namespaces they cannot reach
        mpirun's PMIx server: :func:`~hvdflow.images.runc_probe.launcher_refused`); otherwise itself."""
        if self.execmode != AUTO_MODE or launcher_refused(AUTO_RUNC_MODE, launcher) is None:
            return self
        return replace(self, runc_refused=f"launcher {launcher}: Open MPI's ranks cannot reach mpirun's PMIx server "
                                          "from runc's namespaces")

    def engine(self) -> dict[str, str]:
        """The engine that runs the commands, for the record: the proot binary of udocker's P1/P2 modes."""
        return {"proot": str(self.udocker.proot)}


def udocker_runtime(settings: RuntimeSettings, record: ContainerRecord, catalog: Optional[Path]) -> UdockerRuntime:
    """The udocker runtime of ``record``'s container, its proot the one ``settings`` chooses. (Whether a runc mode
    can run is asked on each rank's node: :mod:`hvdflow.images.execmode_choice`.)"""
    udocker_dir = Path(record.udocker_dir)
    proot = engine_binary(udocker_dir, record.container, settings.options.proot)
    return UdockerRuntime(Udocker(udocker_dir, allow_root=settings.allow_root, proot=proot), record.container,
                          record.execmode, record.runc_container)


def udocker_recorded_engine(settings: RuntimeSettings, image: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The proot that ran udocker's P1/P2 modes, for the run record: the profile's choice, the binary and its sha256
    (the binary None, with a note, where the container does not carry the chosen one)."""
    choice = settings.options.proot
    try:
        binary = engine_binary(Path(image["udocker_dir"]), image["container"], choice)
    except UdockerError as exc:
        return {"choice": choice, "binary": None, "sha256": None, "note": str(exc)}
    return {"choice": choice, "binary": str(binary), "sha256": sha256_file(binary)}


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version line on this node, or None where there is none."""
    try:
        return NVIDIA_DRIVER.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def expose_gpus(setup: NvidiaSetup) -> str:
    """``udocker setup --nvidia`` for the containers of ``setup`` (:meth:`UdockerRuntime.gpu_setup`: both of
    ``execmode: auto``'s), once per driver version; skipped where no driver exists. A note for the rank's log.

    udocker exits 0 even where it set nothing up (no library folder in the image, no driver libraries found), and
    the ranks would then run without a GPU device (runc's modes) or libraries: UdockerError unless udocker's own
    mark of a container set up for NVIDIA (``<container>/nvidia``) is there afterwards."""
    driver = nvidia_driver_version()
    if driver is None:
        return f"no NVIDIA driver on {os.uname().nodename}: udocker setup --nvidia skipped"
    udocker = Udocker(Path(setup.udocker_dir), allow_root=allow_root_from_env())
    for container in setup.containers:
        marker = udocker.state_dir / "nvidia" / f"{container}-{hashlib.sha256(driver.encode()).hexdigest()[:12]}.done"
        with exclusive_lock(marker.with_suffix(".lock"), 600, f"udocker setup --nvidia of {container}"):
            if not marker.exists():
                proc = udocker.check("setup", "--nvidia", "--force", container, timeout=600)
                if not (udocker.udocker_dir / "containers" / container / "nvidia").exists():
                    raise UdockerError(f"udocker setup --nvidia did not set up container {container} for the GPUs "
                                       f"of {os.uname().nodename} (its exit status is 0 all the same): "
                                       f"{output_tail(proc)}")
                marker.write_text(driver + "\n")
    return f"udocker set up for NVIDIA ({driver}): {', '.join(setup.containers)}"
