"""Pulling through udocker as an ordinary user: digest pinning, verification, the lock file, and bad input."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Optional

import yaml

from conftest import HpcUser, TinyRepo
from hvdflow.images.build.image import BuiltImage


def _pull(user: HpcUser, catalog: Path, registry: str, udocker_dir: Path, *extra: str, env: Optional[dict[str, str]] = None,
          action: str = "pull"):
    return user.hvdflow("image", action, "tiny", "--catalog", str(catalog), "--registry", registry,
                        "--udocker-dir", str(udocker_dir), *extra, extra_env=env or {}, timeout=300)


def _containers(user: HpcUser, udocker_dir: Path) -> list[str]:
    """Names of the containers in ``udocker_dir`` as udocker itself lists them."""
    proc = user.run(["udocker", f"--config={udocker_dir}/.hvdflow/udocker.conf", "ps"],
                    extra_env={"UDOCKER_DIR": str(udocker_dir)}, check=True)
    names = []
    for line in proc.stdout.splitlines()[1:]:
        names += [token.strip("[]'\",") for token in line.split() if token.startswith("['")]
    return names


def _manifest_layers(image: BuiltImage) -> list[str]:
    """The layer digests the pushed image's manifest names (read from its OCI layout)."""
    def blob(digest: str) -> dict:  # type: ignore[type-arg]
        return json.loads((image.layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_text())

    return [layer["digest"] for layer in blob(image.manifest_digest)["layers"]]


def test_pull_pins_digest_creates_container_once_and_runs(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    image = tiny_repo.push("1.0", marker=f"first {tiny_repo.repository}")
    catalog = tiny_repo.catalog(hpc_user, "1.0")
    udocker_dir = user_tmp / "udocker"
    first = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir)
    assert first.returncode == 0, first.stderr
    record = json.loads(first.stdout)
    assert record["digest"] == image.manifest_digest
    assert record["container"] == f"tiny-{image.manifest_digest[7:19]}"
    lock = yaml.safe_load((catalog.parent / "images.lock.yaml").read_text())
    assert lock["images"]["tiny"] == {"reference": f"{tiny_repo.repository}:1.0", "digest": image.manifest_digest}
    # every layer udocker stored is the one the manifest names, byte for byte
    layers = _manifest_layers(image)
    assert layers
    for digest in layers:
        stored = udocker_dir / "layers" / digest
        assert stored.is_file(), f"udocker did not store layer {digest}"
        assert "sha256:" + hashlib.sha256(stored.read_bytes()).hexdigest() == digest

    second = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["created"] == record["created"], "the container must be reused, not recreated"
    assert _containers(hpc_user, udocker_dir) == [record["container"]]

    run = hpc_user.run(["udocker", f"--config={udocker_dir}/.hvdflow/udocker.conf", "run", "--nobanner",
                        record["container"], "/bin/cat", "/marker"], extra_env={"UDOCKER_DIR": str(udocker_dir)})
    assert run.returncode == 0 and run.stdout.strip() == f"first {tiny_repo.repository}", run.stdout + run.stderr


def test_digest_changed_under_lock_fails_until_update(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    old = tiny_repo.push("moving", marker=f"old {tiny_repo.repository}")
    catalog = tiny_repo.catalog(hpc_user, "moving")
    udocker_dir = user_tmp / "udocker"
    assert _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir).returncode == 0
    new = tiny_repo.push("moving", marker=f"new {tiny_repo.repository}")
    assert new.manifest_digest != old.manifest_digest

    refused = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir)
    assert refused.returncode == 1
    assert f"resolved to {new.manifest_digest}" in refused.stderr
    assert f"pins {tiny_repo.repository}:moving at {old.manifest_digest}" in refused.stderr
    assert "hvdflow image update tiny" in refused.stderr
    assert old.manifest_digest in (catalog.parent / "images.lock.yaml").read_text()

    updated = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir, action="update")
    assert updated.returncode == 0, updated.stderr
    assert f"tiny ({tiny_repo.repository}:moving) moved from {old.manifest_digest} to {new.manifest_digest}" in updated.stderr
    assert json.loads(updated.stdout)["digest"] == new.manifest_digest
    assert new.manifest_digest in (catalog.parent / "images.lock.yaml").read_text()


def test_blob_with_right_size_and_wrong_content_is_refused(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    image = tiny_repo.push("corrupt")
    manifest = json.loads((image.layout / "blobs" / "sha256" / image.manifest_digest[7:]).read_bytes())
    layer = manifest["layers"][0]["digest"]
    stored = tiny_repo.registry.blob_path(layer)
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    stored.write_bytes(bytes(data))

    catalog = tiny_repo.catalog(hpc_user, "corrupt")
    udocker_dir = user_tmp / "udocker"
    proc = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir)
    assert proc.returncode == 1
    assert f"blob {layer}" in proc.stderr and "has content of digest sha256:" in proc.stderr
    assert not (udocker_dir / "layers" / layer).exists(), "the corrupt blob must not stay in udocker's store"
    assert _containers(hpc_user, udocker_dir) == []
    assert not (catalog.parent / "images.lock.yaml").exists()


def test_layer_that_does_not_extract_leaves_no_container(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    image = tiny_repo.push("broken", broken_tar=True)
    catalog = tiny_repo.catalog(hpc_user, "broken")
    udocker_dir = user_tmp / "udocker"
    proc = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir)
    assert proc.returncode == 1
    assert f"({image.manifest_digest})" in proc.stderr and "the container was removed" in proc.stderr
    assert _containers(hpc_user, udocker_dir) == []
    assert not list((udocker_dir / ".hvdflow" / "containers").glob("*.json"))


def test_missing_tag_and_missing_repository(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    tiny_repo.push("exists")
    udocker_dir = user_tmp / "udocker"
    catalog = tiny_repo.catalog(hpc_user, "nosuchtag")
    proc = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir)
    assert proc.returncode == 1
    assert f"image {tiny_repo.repository}:nosuchtag not found in registry {tiny_repo.registry.url}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_registry_down(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    from hvdflow.testbed.registry_server import free_port

    catalog = tiny_repo.catalog(hpc_user, "1.0")
    down = f"http://127.0.0.1:{free_port()}"
    proc = _pull(hpc_user, catalog, down, user_tmp / "udocker")
    assert proc.returncode == 1
    assert f"registry {down} is not reachable while resolving {tiny_repo.repository}:1.0" in proc.stderr


def test_unknown_image_name(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    catalog = tiny_repo.catalog(hpc_user, "1.0", name="other")
    proc = _pull(hpc_user, catalog, tiny_repo.registry.url, user_tmp / "udocker")
    assert proc.returncode == 1
    assert f"image 'tiny' is not in the catalogue {catalog}; known images: other" in proc.stderr


def test_concurrent_pulls_are_serialised(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    image = tiny_repo.push("conc")
    catalog = tiny_repo.catalog(hpc_user, "conc")
    udocker_dir = user_tmp / "udocker"
    # udocker itself installs its tools on first use; prepare once so both pulls start on the pull itself
    argv = [str(hpc_user.venv / "bin" / "python"), "-m", "hvdflow", "image", "pull", "tiny", "--catalog", str(catalog),
            "--registry", tiny_repo.registry.url, "--udocker-dir", str(udocker_dir)]
    env_args = [f"{k}={v}" for k, v in hpc_user.env().items()]
    procs = [subprocess.Popen(["runuser", "-u", hpc_user.name, "--", "env", "-i", *env_args, *argv], cwd=hpc_user.workspace,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _, err in outputs]
    records = [json.loads(out) for out, _ in outputs]
    assert {r["digest"] for r in records} == {image.manifest_digest}
    assert len({r["created"] for r in records}) == 1, "exactly one of the pulls may create the container"
    assert _containers(hpc_user, udocker_dir) == [records[0]["container"]]
    assert any("waiting for" in err and "pull.lock" in err for _, err in outputs)


def test_lock_held_too_long_times_out_with_holder(hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    tiny_repo.push("held")
    catalog = tiny_repo.catalog(hpc_user, "held")
    udocker_dir = hpc_user.mkdir(user_tmp / "udocker")
    lock = hpc_user.mkdir(udocker_dir / ".hvdflow") / "pull.lock"
    holder = subprocess.Popen(["runuser", "-u", hpc_user.name, "--", "flock", str(lock), "sleep", "30"])
    try:
        deadline = time.monotonic() + 30
        # probe as the user: a probe run as root would create the lock file as root, which the user cannot open
        probe = ["runuser", "-u", hpc_user.name, "--", "flock", "--nonblock", str(lock), "true"]
        while subprocess.run(probe).returncode == 0:  # not held yet
            assert holder.poll() is None and time.monotonic() < deadline, "flock never took the lock"
            time.sleep(0.05)
        proc = _pull(hpc_user, catalog, tiny_repo.registry.url, udocker_dir, env={"HVDFLOW_LOCK_TIMEOUT": "2"})
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1
    assert f"{lock} is still held by" in proc.stderr and "after 2 s" in proc.stderr


def test_udocker_as_root_is_refused(tiny_repo: TinyRepo, tmp_path: Path) -> None:
    import os
    import sys

    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(f"images:\n  tiny: {{description: t, repository: {tiny_repo.repository}, tag: '1', device: cpu, "
                       "python: x, tensorflow: x, horovod: x, mpi: x, execmode: P1, purposes: [train], tested: true}\n")
    env = {k: v for k, v in os.environ.items() if k != "HVDFLOW_ALLOW_ROOT"}
    proc = subprocess.run([sys.executable, "-m", "hvdflow", "image", "pull", "tiny", "--catalog", str(catalog),
                           "--registry", tiny_repo.registry.url, "--udocker-dir", str(tmp_path / "ud")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    assert "refuses to run it as root (uid 0)" in proc.stderr and "--allow-root" in proc.stderr
    assert not (tmp_path / "ud").exists(), "nothing may be created before the refusal"


def _offline(user: HpcUser, action: str, *args: str) -> subprocess.CompletedProcess[str]:
    return user.hvdflow("image", action, *args, timeout=300)


def test_save_and_load_move_the_locked_image_with_its_digest_to_a_site_without_registry(
        hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    image = tiny_repo.push("1.0", marker=f"saved {tiny_repo.repository}")
    catalog = tiny_repo.catalog(hpc_user, "1.0")
    lock = catalog.parent / "images.lock.yaml"
    archive = user_tmp / "tiny.tar"
    unlocked = _offline(hpc_user, "save", "tiny", str(archive), "--catalog", str(catalog), "--registry", tiny_repo.registry.url)
    assert unlocked.returncode == 1 and "is not in" in unlocked.stderr and "hvdflow image pull tiny" in unlocked.stderr
    assert not archive.exists()
    assert _pull(hpc_user, catalog, tiny_repo.registry.url, user_tmp / "udocker-site-a").returncode == 0
    sums = []
    for _ in range(2):  # the same image saves to the same bytes
        saved = _offline(hpc_user, "save", "tiny", str(archive), "--catalog", str(catalog), "--registry", tiny_repo.registry.url)
        assert saved.returncode == 0, saved.stderr
        assert json.loads(saved.stdout)["digest"] == image.manifest_digest
        sums.append(hashlib.sha256(archive.read_bytes()).hexdigest())
    assert sums[0] == sums[1]
    assert [p.name for p in archive.parent.iterdir() if p.name.startswith(".tiny.tar")] == [], "no partial archive left"

    # the air-gapped site: its own checkout of the lock, a fresh udocker, no registry given anywhere
    site = hpc_user.mkdir(user_tmp / "site-b")
    site_catalog = site / "catalog.yaml"
    shutil.copy(catalog, site_catalog)
    shutil.copy(lock, site / "images.lock.yaml")
    udocker_b = user_tmp / "udocker-site-b"
    not_loaded = _offline(hpc_user, "pull", "tiny", "--catalog", str(site_catalog), "--registry", "none",
                          "--udocker-dir", str(udocker_b))
    assert not_loaded.returncode == 1
    assert f"is not loaded into {udocker_b}" in not_loaded.stderr and "hvdflow image load tiny ARCHIVE" in not_loaded.stderr
    loaded = _offline(hpc_user, "load", "tiny", str(archive), "--catalog", str(site_catalog), "--udocker-dir", str(udocker_b))
    assert loaded.returncode == 0, loaded.stderr
    record = json.loads(loaded.stdout)
    assert record["digest"] == image.manifest_digest and record["registry"] == f"oci-archive:{archive}"
    assert (site / "images.lock.yaml").read_text() == lock.read_text(), "the lock already pinned this digest"
    again = _offline(hpc_user, "pull", "tiny", "--catalog", str(site_catalog), "--registry", "none",
                     "--udocker-dir", str(udocker_b))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] == record["created"], "the loaded image's container is reused"
    run = hpc_user.run(["udocker", f"--config={udocker_b}/.hvdflow/udocker.conf", "run", "--nobanner",
                        record["container"], "/bin/cat", "/marker"], extra_env={"UDOCKER_DIR": str(udocker_b)})
    assert run.returncode == 0 and run.stdout.strip() == f"saved {tiny_repo.repository}", run.stdout + run.stderr

    # a layer changed in udocker's store after the load is caught before any job runs
    layer = udocker_b / "layers" / f"{_manifest_layers(image)[0].split(':', 1)[1]}.layer"
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF
    layer.write_bytes(bytes(data))
    tampered = _offline(hpc_user, "pull", "tiny", "--catalog", str(site_catalog), "--registry", "none",
                        "--udocker-dir", str(udocker_b))
    assert tampered.returncode == 1 and f"blob {_manifest_layers(image)[0]}" in tampered.stderr, tampered.stderr


def test_an_archive_of_another_digest_than_the_lock_is_refused_until_update(
        hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    old = tiny_repo.push("moving", marker=f"old {tiny_repo.repository}")
    catalog = tiny_repo.catalog(hpc_user, "moving")
    assert _pull(hpc_user, catalog, tiny_repo.registry.url, user_tmp / "udocker-a").returncode == 0
    archive = user_tmp / "old.tar"
    assert _offline(hpc_user, "save", "tiny", str(archive), "--catalog", str(catalog),
                    "--registry", tiny_repo.registry.url).returncode == 0
    new = tiny_repo.push("moving", marker=f"new {tiny_repo.repository}")
    newer_catalog = tiny_repo.catalog(hpc_user, "moving")
    assert _pull(hpc_user, newer_catalog, tiny_repo.registry.url, user_tmp / "udocker-b").returncode == 0
    lock = newer_catalog.parent / "images.lock.yaml"
    before = lock.read_text()
    udocker_c = user_tmp / "udocker-c"
    refused = _offline(hpc_user, "load", "tiny", str(archive), "--catalog", str(newer_catalog), "--udocker-dir", str(udocker_c))
    assert refused.returncode == 1
    assert f"in the archive {archive} is {old.manifest_digest}" in refused.stderr
    assert f"pins {tiny_repo.repository}:moving at {new.manifest_digest}" in refused.stderr
    assert f"hvdflow image update tiny --archive {archive}" in refused.stderr
    assert lock.read_text() == before and _containers(hpc_user, udocker_c) == []
    repo_dir = udocker_c / "repos" / tiny_repo.repository
    assert not repo_dir.exists() or not any(repo_dir.iterdir()), "nothing of the refused archive is in udocker"

    updated = _offline(hpc_user, "update", "tiny", "--archive", str(archive), "--catalog", str(newer_catalog),
                       "--udocker-dir", str(udocker_c))
    assert updated.returncode == 0, updated.stderr
    assert f"moved from {new.manifest_digest} to {old.manifest_digest}" in updated.stderr
    assert old.manifest_digest in lock.read_text()


def test_image_check_of_an_image_without_python_names_it_and_keeps_nothing_running(
        hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    image = tiny_repo.push("nopython")
    catalog = tiny_repo.catalog(hpc_user, "nopython")
    proc = _offline(hpc_user, "check", "tiny", "--catalog", str(catalog), "--registry", tiny_repo.registry.url,
                    "--udocker-dir", str(user_tmp / "udocker"), "--proot", "host", "--purposes", "train")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "hvdflow: error: image tiny cannot run these jobs: python is none (needs >= 3.8; blocks training)" in proc.stderr
    assert {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("!")} == {
        "python", "numpy", "tensorflow", "tf.keras", "horovod"}
    facts = json.loads((user_tmp / "udocker" / ".hvdflow" / "checks" / f"{image.manifest_digest[7:]}.json").read_text())
    assert facts["python"] == "none" and facts["probe_error"], facts


def test_a_legacy_docker_save_archive_loads_under_the_digest_of_the_manifest_written_for_it(
        hpc_user: HpcUser, tiny_repo: TinyRepo, user_tmp: Path) -> None:
    # what `docker save` wrote before Docker 25: manifest.json, the config, the layers uncompressed (skopeo writes it)
    image = tiny_repo.push("1.0", marker=f"legacy {tiny_repo.repository}")
    legacy = user_tmp / "legacy.tar"
    subprocess.run(["skopeo", "copy", "--insecure-policy", f"oci:{image.layout}:1.0",
                    f"docker-archive:{legacy}:{tiny_repo.repository}:1.0"], check=True, capture_output=True)
    os.chmod(legacy, 0o644)
    catalog = tiny_repo.catalog(hpc_user, "1.0")
    digests = []
    for site in ("a", "b"):  # the same archive, two users' udocker: the same digest, which the lock pins
        udocker_dir = user_tmp / f"udocker-legacy-{site}"
        loaded = _offline(hpc_user, "load", "tiny", str(legacy), "--catalog", str(catalog), "--udocker-dir", str(udocker_dir))
        assert loaded.returncode == 0, loaded.stderr
        record = json.loads(loaded.stdout)
        assert record["registry"] == f"docker-archive:{legacy}"
        digests.append(record["digest"])
        run = hpc_user.run(["udocker", f"--config={udocker_dir}/.hvdflow/udocker.conf", "run", "--nobanner",
                            record["container"], "/bin/cat", "/marker"], extra_env={"UDOCKER_DIR": str(udocker_dir)})
        assert run.returncode == 0 and run.stdout.strip() == f"legacy {tiny_repo.repository}", run.stdout + run.stderr
        assert not list((udocker_dir / ".hvdflow").glob(".docker-archive-*")), "the converted copy was left behind"
    assert digests[0] == digests[1] != image.manifest_digest  # the registry's manifest has compressed layers
    assert f"sha256:{digests[0].split(':', 1)[1]}" in (catalog.parent / "images.lock.yaml").read_text()

    # one byte changed in a layer: named against the config's diff_ids, nothing loaded, no copy left
    with tarfile.open(legacy) as tar:
        members = {m.name: tar.extractfile(m).read() if m.isfile() else None for m in tar.getmembers()}  # type: ignore[union-attr]
        infos = {m.name: m for m in tar.getmembers()}
    layer = json.loads(members["manifest.json"])[0]["Layers"][0]  # type: ignore[arg-type]
    data = bytearray(members[layer])  # type: ignore[arg-type]
    data[len(data) // 2] ^= 0xFF
    members[layer] = bytes(data)
    tampered = user_tmp / "tampered.tar"
    with tarfile.open(tampered, "w") as tar:
        for name, info in infos.items():
            tar.addfile(info, io.BytesIO(members[name]) if members[name] is not None else None)  # type: ignore[arg-type]
    os.chmod(tampered, 0o644)
    udocker_dir = user_tmp / "udocker-legacy-c"
    refused = _offline(hpc_user, "load", "tiny", str(tampered), "--catalog", str(catalog), "--udocker-dir", str(udocker_dir))
    assert refused.returncode == 1 and f"{tampered}: layer {layer} has content of digest" in refused.stderr, refused.stderr
    assert not (udocker_dir / "repos").exists() or not any((udocker_dir / "repos").iterdir())
    assert not list((udocker_dir / ".hvdflow").glob(".docker-archive-*"))
