"""Pull a catalogue image with udocker, pinned by digest and verified, and create its container once.

udocker does not check layer digests on pull, and ``udocker create`` can exit 0 after a failed extraction, so hvdflow
resolves the manifest itself, checks that udocker stored exactly that manifest, hashes every blob udocker stored, and
records a container as usable only after it was created, set up and ran a command. (udocker 1.3.17 cannot pull
``repository@digest`` for repositories with a ``/`` in their name, so it pulls the tag under hvdflow's lock.)
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from hvdflow.errors import ImageError
from hvdflow.files.atomic import write_text_atomic
from hvdflow.files.cache import sha256_file
from hvdflow.files.filelock import exclusive_lock
from hvdflow.images.catalog import ImageSpec
from hvdflow.images.lockfile import check_against_lock, read_lock, write_lock_entry
from hvdflow.images.modes import AUTO_FALLBACK_MODE, AUTO_MODE, AUTO_RUNC_MODE, RUNC_MODES
from hvdflow.images.registry import Manifest, resolve_manifest
from hvdflow.images.registry_auth import Credentials
from hvdflow.images.runc_probe import probe_runc_mode, require_runc_mode
from hvdflow.runtime.record import ContainerRecord
from hvdflow.runtime.udocker.client import Udocker

PULL_LOCK_TIMEOUT = float(os.environ.get("HVDFLOW_LOCK_TIMEOUT", "1800"))


def container_name(spec: ImageSpec, digest: str, execmode: str) -> str:
    """The container name of ``spec`` at ``digest`` in ``execmode``: a new digest gets a new container, and runc's
    modes one of their own (R1 replaces the root's /etc/hosts, passwd and group by links to its per-run copies, which
    proot's modes would then follow to nothing)."""
    name = f"{spec.name}-{digest.split(':', 1)[1][:12]}"
    return f"{name}-{execmode.lower()}" if execmode in RUNC_MODES else name


def _record_path(udocker: Udocker, name: str) -> Path:
    return udocker.state_dir / "containers" / f"{name}.json"


def tag_dir(udocker: Udocker, spec: ImageSpec) -> Path:
    """Where udocker keeps the tag of ``spec``: a pull's ``manifest``, a load's ``ancestry``."""
    return udocker.udocker_dir / "repos" / spec.repository / spec.tag


def stored_json(udocker: Udocker, spec: ImageSpec, name: str) -> tuple[Path, Any]:
    """The path of udocker's file ``name`` for the tag of ``spec`` and its JSON content (None: absent or unreadable)."""
    path = tag_dir(udocker, spec) / name
    try:
        return path, json.loads(path.read_text())
    except (OSError, ValueError):
        return path, None


def verify_stored_manifest(udocker: Udocker, spec: ImageSpec, manifest: Manifest) -> None:
    """Check that the manifest udocker stored for the tag is the one resolved (the tag did not move meanwhile)."""
    path, stored = stored_json(udocker, spec, "manifest")
    if stored is None:
        raise ImageError(f"image {spec.reference}: udocker stored no readable manifest at {path}")
    if stored != manifest.document:
        raise ImageError(f"image {spec.reference} changed in {manifest.registry_url} while it was pulled "
                         f"(resolved {manifest.digest}); pull again")


def verify_blobs(manifest: Manifest, image: str, stored: Callable[[str], Path]) -> None:
    """Hash the file ``stored(digest)`` of every blob of ``manifest``; on a mismatch delete it and raise ImageError."""
    for digest in manifest.blobs:
        path = stored(digest)
        if not path.exists():
            raise ImageError(f"image {image}: blob {digest} of manifest {manifest.digest} is missing from {path.parent}")
        actual = "sha256:" + sha256_file(path)
        if actual != digest:
            path.unlink()
            raise ImageError(
                f"image {image}: blob {digest} from {manifest.registry_url} has content of digest {actual}; "
                "the source served corrupt or substituted data. The blob was deleted; nothing was created."
            )


def udocker_pull(udocker: Udocker, spec: ImageSpec, registry_url: str, credentials: Credentials | None
                 ) -> subprocess.CompletedProcess[str]:
    """``udocker pull`` of the image from ``registry_url``; with credentials, logged in for that pull only (the
    password goes through stdin, never the command line, and udocker's keystore forgets it afterwards)."""
    if credentials is None:
        return udocker.call("pull", f"--registry={registry_url}", spec.reference)
    login = udocker.call("login", f"--registry={registry_url}", f"--username={credentials.username}",
                         "--password-stdin", stdin_text=credentials.password + "\n")
    if login.returncode != 0:
        raise ImageError(f"udocker login to {registry_url} as {credentials.username} failed (exit {login.returncode}): "
                         f"{(login.stderr or login.stdout).strip()[-500:]}")
    try:
        return udocker.call("pull", f"--registry={registry_url}", spec.reference)
    finally:
        udocker.call("logout", f"--registry={registry_url}")


def pull_image(udocker: Udocker, spec: ImageSpec, profile_registry: str, lock_path: Path, update_lock: bool = False
               ) -> Manifest:
    """Resolve, check against the lock, pull by digest and verify ``spec``; record its digest in the lock file.

    The image comes from its catalogue entry's registry if it names one, else from the profile's.
    """
    registry_url = spec.registry_url(profile_registry)
    credentials = spec.credentials()
    udocker.prepare()
    with exclusive_lock(udocker.state_dir / "pull.lock", PULL_LOCK_TIMEOUT, f"pulling {spec.reference}"):
        manifest = resolve_manifest(registry_url, spec.repository, spec.tag, credentials=credentials)
        must_write = check_against_lock(lock_path, spec.name, spec.reference, manifest.digest, update_lock)
        stored = tag_dir(udocker, spec)
        if stored.is_dir() and not (stored / "manifest").exists():  # loaded from an archive (udocker's v1 form)
            udocker.check("rmi", spec.reference)
        proc = udocker_pull(udocker, spec, registry_url, credentials)
        if proc.returncode != 0:
            raise ImageError(f"udocker pull {spec.reference} from {registry_url} failed (exit {proc.returncode}): "
                             f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        try:
            verify_stored_manifest(udocker, spec, manifest)
            verify_blobs(manifest, spec.reference, lambda digest: udocker.udocker_dir / "layers" / digest)
        except ImageError:
            udocker.call("rmi", spec.reference)
            raise
        if must_write:
            write_lock_entry(lock_path, spec.name, spec.reference, manifest.digest)
    return manifest


def read_container_record(udocker: Udocker, name: str) -> ContainerRecord | None:
    """The record of a usable container ``name``, or None if it was never completed."""
    path = _record_path(udocker, name)
    if not path.exists():
        return None
    return ContainerRecord.read(path)


def pinned_container(udocker: Udocker, spec: ImageSpec, lock_path: Path, execmode: str | None = None
                     ) -> ContainerRecord | None:
    """The container made earlier from the digest ``lock_path`` pins for ``spec`` (created only after its layers
    were verified against that digest), where udocker still holds it in the execution mode asked (under ``auto``: the
    P1 container, and the R1 one where it was made); else None. What a pull falls back on when the registry cannot be
    reached: the pinned image is there, nothing needs fetching."""
    entry = read_lock(lock_path).get(spec.name)
    if entry is None or entry.reference != spec.reference:
        return None
    mode = execmode or spec.execmode
    if mode == AUTO_MODE:
        fallback = pinned_container(udocker, spec, lock_path, AUTO_FALLBACK_MODE)
        runc = pinned_container(udocker, spec, lock_path, AUTO_RUNC_MODE)
        return None if fallback is None else _auto_record(fallback, runc)
    record = read_container_record(udocker, container_name(spec, entry.digest, mode))
    if record is None or record.digest != entry.digest or record.execmode != mode:
        return None
    return record if (udocker.udocker_dir / "containers" / record.container).is_dir() else None


def ensure_container(udocker: Udocker, spec: ImageSpec, manifest: Manifest, execmode: str | None = None) -> ContainerRecord:
    """The container of ``spec`` at ``manifest.digest``: created, set up and probed once, then reused. Under ``auto``
    two: P1's, which every node can run, and R1's where this node can run R1 (each rank chooses between them on its
    own node: :mod:`hvdflow.images.execmode_choice`)."""
    mode = execmode or spec.execmode
    if mode == AUTO_MODE:
        fallback = ensure_container(udocker, spec, manifest, AUTO_FALLBACK_MODE)
        can_run = probe_runc_mode().cause() is None
        return _auto_record(fallback, ensure_container(udocker, spec, manifest, AUTO_RUNC_MODE) if can_run else None)
    require_runc_mode(mode)
    name = container_name(spec, manifest.digest, mode)
    with exclusive_lock(udocker.state_dir / "pull.lock", PULL_LOCK_TIMEOUT, f"creating container {name}"):
        record = read_container_record(udocker, name)
        if record is not None and record.execmode == mode and (udocker.udocker_dir / "containers" / name).exists():
            return replace(record, registry=manifest.registry_url)  # where the image came from this time
        if record is not None and record.execmode != mode:
            udocker.check("setup", f"--execmode={mode}", name)
        else:
            _create(udocker, spec, manifest, name, mode)
        record = ContainerRecord(
            image=spec.name, reference=spec.reference, registry=manifest.registry_url, digest=manifest.digest,
            container=name, execmode=mode, udocker_dir=str(udocker.udocker_dir), created=time.time(),
        )
        path = _record_path(udocker, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, record.to_json())
        return record


def _auto_record(fallback: ContainerRecord, runc: ContainerRecord | None) -> ContainerRecord:
    """The record of ``execmode: auto``: P1's container, and R1's beside it where it was made."""
    return replace(fallback, execmode=AUTO_MODE, runc_container=None if runc is None else runc.container)


def _create(udocker: Udocker, spec: ImageSpec, manifest: Manifest, name: str, mode: str) -> None:
    """Create container ``name``; remove it and raise ImageError if any step shows it is not usable."""
    _record_path(udocker, name).unlink(missing_ok=True)
    udocker.call("rm", "-f", name)  # a leftover of an interrupted create: never reuse a half-made container
    steps = (
        ("create", ("create", f"--name={name}", spec.reference)),
        ("setup", ("setup", f"--execmode={mode}", name)),
        ("probe run", ("run", "--nobanner", "--pull=never", name, "/bin/sh", "-c", "exit 0")),
    )
    for what, args in steps:
        proc = udocker.call(*args)
        output = (proc.stdout or "") + (proc.stderr or "")
        if proc.returncode != 0 or "Error:" in output:
            udocker.call("rm", "-f", name)
            raise ImageError(
                f"image {spec.reference} ({manifest.digest}): {what} of container {name} failed "
                f"(exit {proc.returncode}); the container was removed:\n{output.strip()[-2000:]}"
            )
