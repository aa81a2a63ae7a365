"""``hvdflow doctor``: every check in order, the compute node's through one short Slurm job, and what a ticket needs
to say where they ran."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from hvdflow.code_location import with_this_hvdflow
from hvdflow.config.profile import ClusterProfile
from hvdflow.doctor import host, slurm_checks
from hvdflow.doctor.findings import FAILURE, Finding, failure, ok, warning
from hvdflow.doctor.node import read_node_report
from hvdflow.doctor.profile_files import DoctorProfile, load_doctor_profile
from hvdflow.errors import HvdflowError
from hvdflow.files.heartbeat import tree_bytes
from hvdflow.files.yamlfile import load_mapping
from hvdflow.images.catalog import ImageSpec, load_catalog
from hvdflow_wire import WireError

NODE_JOB_MINUTES = 5
NODE_JOB_WAIT = 600.0
"""Seconds the doctor waits for its node job (queueing included) before it says the queue is busy."""


def largest_dataset_bytes(workdir: Path) -> int:
    """The bytes of the largest prepared dataset (``resources/datasets/<name>/``), what staging copies to a node."""
    sizes = [tree_bytes(folder) for folder in (workdir / "resources" / "datasets").glob("*") if folder.is_dir()]
    return max(sizes, default=0)


def images_used(config: dict[str, Any], catalog: dict[str, ImageSpec]) -> list[str]:
    """The catalogue images the config's datasets and experiments run in, in catalogue order."""
    named = {str(entry["image"]) for section in ("datasets", "experiments")
             for entry in (config.get(section) or {}).values() if isinstance(entry, dict) and "image" in entry}
    return [name for name in catalog if name in named]


def node_job(profile: DoctorProfile, workdir: Path) -> list[Finding]:
    """The node's checks, through one ``srun`` job of one task on the train partition with the profile's GPUs."""
    cluster = profile.cluster.slurm
    assert cluster is not None
    base = host.existing_parent(profile.cluster.udocker_dir)
    with tempfile.NamedTemporaryFile("w", dir=base, prefix=".hvdflow-doctor-", delete=True) as probe:
        expected = f"{socket.gethostname()} {os.getpid()} {time.time()}"
        probe.write(expected)
        probe.flush()
        argv = ["srun", "--nodes=1", "--ntasks=1", "--job-name=hvdflow-doctor", f"--time={NODE_JOB_MINUTES}",
                *([f"--partition={profile.partition}"] if profile.partition else []),
                *([f"--account={profile.account}"] if profile.account else []),
                *([f"--gres=gpu:{cluster.gpus_per_node}"] if cluster.gpus_per_node else []),
                sys.executable, "-m", "hvdflow.doctor.node", "--profile-file", str(profile.cluster.path.resolve()),
                "--probe", probe.name, "--expected", expected, "--what", str(profile.cluster.udocker_dir),
                "--need-bytes", str(largest_dataset_bytes(workdir))]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=NODE_JOB_WAIT,
                                  env=with_this_hvdflow(os.environ), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return [warning("node job", f"no node within {NODE_JOB_WAIT:.0f} s (the queue is busy)",
                            "run hvdflow doctor again later, or with --no-job for the login node's checks only")]
    try:
        report = read_node_report(proc.stdout)
    except WireError as exc:
        return [failure("node job", str(exc), "run the same hvdflow on the login and compute nodes (the shared "
                        "directory's venv), or report this as a bug")]
    if report is None:
        return [failure("node job", f"srun exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}",
                        "fix what Slurm says above (the partition, account or GRES the profile asks for)")]
    return [ok("node job", f"ran on {report.host}"), *report.findings]


def _config(workdir: Path, config_file: Path) -> tuple[dict[str, Any], dict[str, ImageSpec], Path]:
    config = load_mapping(workdir / config_file)
    catalog_path = workdir / str(config.get("catalog", "containers/catalog.yaml"))
    return config, load_catalog(catalog_path), workdir / str(config.get("lock", "containers/images.lock.yaml"))


def _runtime_checks(cluster: ClusterProfile, catalog: dict[str, ImageSpec], lock: Path, used: list[str]
                    ) -> list[Finding]:
    findings = []
    if cluster.runtime == "udocker":
        findings += [host.udocker_directory(cluster), host.seccomp_trace(),
                     host.proot_runs(cluster)]
    findings += [host.user_namespaces(cluster.execmode), host.image_builds()]
    findings += host.images_available(cluster, catalog, lock, used)
    mpi = host.open_mpi(cluster, [catalog[name] for name in used])
    return findings + ([mpi] if mpi is not None else [])


def _slurm_findings(profile: DoctorProfile, workdir: Path, with_job: bool) -> list[Finding]:
    findings = [slurm_checks.client()]
    if findings[0].status == FAILURE:
        return findings
    findings += slurm_checks.partition(profile)
    findings.append(slurm_checks.account(profile))
    if not with_job:
        return findings + [warning("node job", "not run (--no-job)", "run hvdflow doctor without --no-job to check "
                                   "a compute node")]
    if any(f.status == FAILURE and f.check in ("partition", "account") for f in findings):
        return findings + [warning("node job", "not submitted: Slurm would refuse it for the failure above",
                                   "fix the partition or account, then run hvdflow doctor again")]
    return findings + node_job(profile, workdir)


def run_doctor(profile_name: Optional[str], workdir: Path, config_file: Path, with_job: bool = True
               ) -> tuple[list[Finding], dict[str, Any]]:
    """Every finding, in order, and what a ticket says of where they were made (host, user, profile, revision)."""
    about: dict[str, Any] = {"host": socket.gethostname(), "user": os.environ.get("USER", str(os.getuid())),
                             "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "workdir": str(workdir),
                             "revision": _revision(workdir)}
    findings = [host.python_and_packages()]
    try:
        profile = load_doctor_profile(profile_name, workdir)
        config, catalog, lock = _config(workdir, config_file)
    except HvdflowError as exc:
        mend = "mend what the message names (a key of that file, or the environment variable it reads)"
        return findings + [failure("profile and config", str(exc), mend)], about
    cluster = profile.cluster
    about["profile"] = profile.name
    findings.append(ok("profile", f"{profile.name}: runtime {cluster.runtime}, launcher {cluster.launcher}, "
                       f"scheduler {'slurm' if cluster.slurm else 'none'}, registry {cluster.registry}"))
    findings += _runtime_checks(cluster, catalog, lock, images_used(config, catalog))
    if cluster.slurm is not None:
        findings += _slurm_findings(profile, workdir, with_job)
    return findings, about


def _revision(workdir: Path) -> str:
    proc = subprocess.run(["git", "-C", str(workdir), "describe", "--always", "--dirty"], capture_output=True,
                          text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "not a git checkout"
