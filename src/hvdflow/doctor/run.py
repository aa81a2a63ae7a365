"""``hvdflow doctor``: every check in order, each finding given as it is made, the compute node's through one short
Slurm job (:mod:`hvdflow.doctor.node_job`), and what a ticket needs to say where they ran."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from hvdflow.config.profile import ClusterProfile
from hvdflow.doctor import host, slurm_checks
from hvdflow.doctor.findings import FAILURE, Finding, failure, ok, warning
from hvdflow.doctor.node_job import DEFAULT_WAIT, largest_dataset_bytes, node_job
from hvdflow.doctor.profile_files import DoctorProfile, load_doctor_profile
from hvdflow.errors import HvdflowError
from hvdflow.files.yamlfile import load_mapping
from hvdflow.images.catalog import ImageSpec, load_catalog
from hvdflow.runtime import host_checks


def images_used(config: dict[str, Any], catalog: dict[str, ImageSpec]) -> list[str]:
    """The catalogue images the config's datasets and experiments run in, in catalogue order."""
    named = {str(entry["image"]) for section in ("datasets", "experiments")
             for entry in (config.get(section) or {}).values() if isinstance(entry, dict) and "image" in entry}
    return [name for name in catalog if name in named]


def _config(workdir: Path, config_file: Path) -> tuple[dict[str, Any], dict[str, ImageSpec], Path]:
    config = load_mapping(workdir / config_file)
    catalog_path = workdir / str(config.get("catalog", "containers/catalog.yaml"))
    return config, load_catalog(catalog_path), workdir / str(config.get("lock", "containers/images.lock.yaml"))


def _runtime_checks(cluster: ClusterProfile, catalog: dict[str, ImageSpec], lock: Path, used: list[str]
                    ) -> Iterator[Finding]:
    yield from host_checks(cluster.runtime)
    yield host.user_namespaces(cluster.runtime.execmode)
    yield host.image_builds()
    yield from host.images_available(cluster, catalog, lock, used)
    mpi = host.open_mpi(cluster, [catalog[name] for name in used])
    if mpi is not None:
        yield mpi


def _slurm_findings(profile: DoctorProfile, workdir: Path, with_job: bool, wait: float,
                    say: Optional[Callable[[str], None]]) -> Iterator[Finding]:
    made = [slurm_checks.client()]
    yield made[0]
    if made[0].status == FAILURE:
        return
    for finding in [*slurm_checks.partition(profile), slurm_checks.account(profile)]:
        made.append(finding)
        yield finding
    if not with_job:
        yield warning("node job", "not run (--no-job)", "run hvdflow doctor without --no-job to check a compute node")
    elif any(f.status == FAILURE and f.check in ("partition", "account") for f in made):
        yield warning("node job", "not submitted: Slurm would refuse it, or no node could take it, for the failure "
                      "above", "fix the partition or account, then run hvdflow doctor again")
    else:
        yield from node_job(profile, largest_dataset_bytes(workdir), wait, *([say] if say else []))


def ticket_facts(workdir: Path) -> dict[str, Any]:
    """What a ticket says of where the findings were made (host, user, time, folder, hvdflow's revision); the
    profile's name is added once it is read."""
    return {"host": socket.gethostname(), "user": os.environ.get("USER", str(os.getuid())),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "workdir": str(workdir), "revision": _revision(workdir)}


def run_doctor(profile_name: Optional[str], workdir: Path, config_file: Path, about: dict[str, Any],
               with_job: bool = True, wait: float = DEFAULT_WAIT, say: Optional[Callable[[str], None]] = None
               ) -> Iterator[Finding]:
    """Every finding, in order, each as it is made (the node job's waits said through ``say``: stderr by default);
    the profile's name is written into ``about`` (:func:`ticket_facts`) once read."""
    yield host.python_and_packages()
    try:
        profile = load_doctor_profile(profile_name, workdir)
        config, catalog, lock = _config(workdir, config_file)
    except HvdflowError as exc:
        mend = "mend what the message names (a key of that file, or the environment variable it reads)"
        yield failure("profile and config", str(exc), mend)
        return
    cluster = profile.cluster
    about["profile"] = profile.name
    yield ok("profile", f"{profile.name}: runtime {cluster.runtime.kind}, launcher {cluster.launcher}, "
             f"scheduler {'slurm' if cluster.slurm else 'none'}, registry {cluster.registry}")
    yield from _runtime_checks(cluster, catalog, lock, images_used(config, catalog))
    if cluster.slurm is not None:
        yield from _slurm_findings(profile, workdir, with_job, wait, say)


def _revision(workdir: Path) -> str:
    proc = subprocess.run(["git", "-C", str(workdir), "describe", "--always", "--dirty"], capture_output=True,
                          text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "not a git checkout"
