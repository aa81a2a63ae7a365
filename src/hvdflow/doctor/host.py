"""The login node's checks of ``hvdflow doctor`` besides the runtime's own (:func:`hvdflow.runtime.host_checks`):
Python and hvdflow's pinned dependencies, user namespaces and runc (udocker's R1 and rootless image builds), whether
images can be built here, each locked image at the registry (or loaded, with ``registry: none``), and Open MPI for
``launcher: mpi``."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

from hvdflow.config.profile import ClusterProfile
from hvdflow.doctor.findings import Finding, failure, ok, warning
from hvdflow.errors import HvdflowError, RegistryUnreachable
from hvdflow.images.build.rootless import rootless_problem
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.lockfile import read_lock
from hvdflow.images.modes import AUTO_MODE, RUNC_MODES
from hvdflow.images.offline import NO_REGISTRY
from hvdflow.images.registry import resolve_manifest
from hvdflow.images.runc_probe import probe_runc_mode
from hvdflow.runtime import store_of
from hvdflow.runtime.record import ContainerRecord

REQUIREMENT = re.compile(r'"?([A-Za-z0-9_.-]+)==([^";\s]+)')
PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"
"""The checkout's pyproject.toml (where hvdflow runs from its checkout, as the rules do)."""


def pinned_requirements() -> dict[str, str]:
    """hvdflow's pinned runtime dependencies (name -> version): ``[project] dependencies`` of the checkout's
    pyproject.toml, or the installed package's metadata."""
    if PYPROJECT.exists():
        text = PYPROJECT.read_text()
        block = text[text.index("dependencies = ["):]
        return dict(REQUIREMENT.findall(block[:block.index("]")]))
    try:
        requires = importlib.metadata.requires("hvdflow") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    # an installed hvdflow's metadata lists the test extra's pins too, marked `; extra == "test"`: not the runtime's
    runtime = [r for r in requires if "extra ==" not in r.partition(";")[2]]
    return dict(m.groups() for m in map(REQUIREMENT.match, runtime) if m)


def python_and_packages() -> Finding:
    """This Python and each pinned dependency installed at its pinned version (another version: a warning)."""
    version = ".".join(map(str, sys.version_info[:3]))
    missing, other = [], []
    pins = pinned_requirements()
    if not pins:
        return warning("python", f"Python {version} at {sys.executable}; hvdflow's pins not found (no {PYPROJECT}, "
                       "hvdflow not installed)", "run hvdflow from its checkout, or install it: pip install .")
    for name, pinned in pins.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"{name}=={pinned}")
            continue
        if installed != pinned:
            other.append(f"{name} {installed} (pinned {pinned})")
    where = f"Python {version} at {sys.executable}"
    if sys.version_info < (3, 9):
        return failure("python", f"{where}: hvdflow needs 3.9 or newer", "run hvdflow from a Python 3.9+ venv")
    if missing:
        return failure("python", f"{where}: missing {', '.join(missing)}",
                       "install hvdflow into this venv: pip install -c requirements/constraints.txt .")
    if other:
        return warning("python", f"{where}: {', '.join(other)}",
                       "pip install -c requirements/constraints.txt . gives the versions hvdflow is tested with")
    return ok("python", f"{where}, every pinned dependency at its version")


def user_namespaces(execmode: Optional[str]) -> Finding:
    """Whether udocker's runc mode (R1) can run here: user namespaces for this user and runc (rootless image builds
    need the namespaces too); a failure where the profile's ``execmode`` is R1, else a warning (``auto`` runs P1
    where R1 cannot run)."""
    probe = probe_runc_mode()
    problem = probe.problem("R1")
    if problem is not None:
        if execmode in RUNC_MODES:
            return failure("user namespaces and runc", problem, "set runtime.execmode: auto or P1 in the profile's hvdflow.yaml")
        if execmode == AUTO_MODE:
            return warning("user namespaces and runc", f"{probe.cause()}: execmode auto runs P1 (proot) here",
                           "P1 runs slower than R1 (docs/measurements.md); ask the site for user namespaces and runc")
        return warning("user namespaces and runc", problem, "P1 (proot) needs neither")
    chooses = "execmode auto runs R1 here" if execmode == AUTO_MODE else "execmode R1 can run here"
    return ok("user namespaces and runc", f"allowed (max_user_namespaces = {probe.max_user_namespaces}); runc: "
              f"{probe.runc}: {chooses}")


def image_builds() -> Finding:
    """Whether this user can build hvdflow's images here: as root, or without root in a user namespace."""
    if os.geteuid() == 0:
        return ok("image builds", "as root (mmdebstrap, chroot)")
    problem = rootless_problem()
    if problem is not None:
        return warning("image builds", f"not without root here: {problem[0]}", problem[1])
    return ok("image builds", "without root: in a user namespace holding this user's subordinate ids, mmdebstrap in "
              "its unshare mode")


def images_available(profile: ClusterProfile, catalog: Mapping[str, ImageSpec], lock_path: Path,
                     wanted: Sequence[str]) -> list[Finding]:
    """Each image the config uses: its locked digest served by its registry, or loaded (its layers hashed again)
    where ``registry: none``; an image not pinned yet at least has its tag at the registry."""
    lock = read_lock(lock_path)
    findings = []
    for name in wanted:
        spec, entry = catalog[name], lock.get(name)
        check = f"image {name}"
        if profile.registry == NO_REGISTRY:
            try:
                manifest = store_of(profile.runtime).loaded(spec, lock_path)
            except HvdflowError as exc:
                findings.append(failure(check, str(exc), f"hvdflow image load {name} ARCHIVE"))
            else:
                findings.append(ok(check, f"{spec.repository}@{manifest.digest} loaded in {profile.runtime.udocker_dir}"))
            continue
        url = spec.registry_url(profile.registry)
        reference = entry.digest if entry is not None else spec.tag
        try:
            manifest = resolve_manifest(url, spec.repository, reference, timeout=15, credentials=spec.credentials())
        except HvdflowError as exc:
            pinned = _pinned(profile, spec, lock_path) if isinstance(exc, RegistryUnreachable) else None
            if pinned is not None:
                findings.append(warning(check, f"{exc}; the pipeline uses container {pinned.container}, made from the "
                                        f"pinned digest {pinned.digest}", "nothing, to run what is pinned; to pull "
                                        "another image, reach the registry (HVDFLOW_REGISTRY)"))
                continue
            findings.append(failure(check, str(exc), "start or reach the registry, or name the one that serves it (the "
                                    "profile's registry, HVDFLOW_REGISTRY); with none: registry: none and "
                                    f"`hvdflow image load {name} ARCHIVE`"))
            continue
        pinned = "the locked digest" if entry is not None else "not pinned yet (the first pull pins it)"
        findings.append(ok(check, f"{url} serves {spec.repository}@{manifest.digest}, {pinned}"))
    return findings


def _pinned(profile: ClusterProfile, spec: ImageSpec, lock_path: Path) -> Optional[ContainerRecord]:
    """The container the pipeline's pull falls back on where no registry answers, if there is one."""
    try:
        store = store_of(profile.runtime)
    except HvdflowError:
        return None
    return store.pinned(spec, lock_path, profile.runtime.execmode)


def open_mpi(profile: ClusterProfile, specs: Sequence[ImageSpec]) -> Optional[Finding]:
    """For ``launcher: mpi``: the host's Open MPI against the images' (the same major.minor, or mpirun cannot start
    the image's ranks); None for other launchers."""
    if profile.launcher != "mpi":
        return None
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return failure("open mpi", "launcher mpi but no mpirun on PATH",
                       "load the site's Open MPI module (the images' version) or set launcher: gloo")
    shown = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"Open MPI\)?\s+(\d+\.\d+)(\.\d+)?", shown)
    host = found.group(1) + (found.group(2) or "") if found else "unknown"
    wanted = {s.mpi.removeprefix("openmpi-") for s in specs if s.mpi.startswith("openmpi-")}
    differs = sorted(v for v in wanted if v.split(".")[:2] != host.split(".")[:2])
    if not found or differs:
        return warning("open mpi", f"host mpirun {host} at {mpirun}; the images have {', '.join(sorted(wanted))}",
                       "load the Open MPI the images have, or set launcher: gloo")
    return ok("open mpi", f"host mpirun {host}, as the images'")
