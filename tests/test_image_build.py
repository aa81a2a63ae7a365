"""Reproducible image builds, on the small recipe (tests/recipes/small): the same recipe built twice, from two empty
caches, by root and by an ordinary user without root, gives one digest; the user's archive of it loads with no
registry; a Debian version the mirror no longer serves is named, and nothing that looks built stays; `hvdflow image
check` on that image (no Horovod, TensorFlow nor numpy) names each missing part.

mmdebstrap and chroot (as root, or in a user namespace) and Debian's and PyPI's servers, like the hvdflow-cpu build;
about half a minute a build."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, HpcUser, _chown_tree
from hvdflow.images.build.commands import BuildError
from hvdflow.images.build.image import BuiltImage, build_image
from hvdflow.images.build.pins import read_debian_manifest
from hvdflow.images.catalog import load_catalog

pytestmark = [pytest.mark.image, pytest.mark.testbed_lane]  # in the test bed's lane: builds use the cores its timers leave

CATALOG = REPO / "tests" / "recipes" / "catalog.yaml"
EPOCH = 1795564800  # the small recipe's source_date_epoch


def _build(cache: Path, log: Path, monkeypatch: pytest.MonkeyPatch, catalog: Path = CATALOG,
           debian: str = "follow") -> BuiltImage:
    monkeypatch.setenv("HVDFLOW_CACHE", str(cache))
    return build_image(load_catalog(catalog)["small"], log, debian)


def _blob(image: BuiltImage, digest: str) -> Path:
    return image.layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def test_the_small_recipe_built_twice_from_empty_caches_gives_one_digest_and_image_check_names_what_it_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hpc_user: HpcUser, user_tmp: Path) -> None:
    # "follow": where Debian's mirror has moved on since the manifest, both builds follow it alike (the strict check:
    # the next test); the two builds share nothing but the recipe. The first is root's, in this process; the second
    # the ordinary user's, without root (a user namespace holding its subordinate ids), in a login-like environment
    first = _build(tmp_path / "cache-a", tmp_path / "a.log", monkeypatch)
    recipes = user_tmp / "recipes"
    shutil.copytree(REPO / "tests" / "recipes", recipes)
    _chown_tree(recipes, hpc_user.uid, hpc_user.gid)
    cache = user_tmp / "cache-b"
    archive = user_tmp / "small.tar"
    built = hpc_user.hvdflow("image", "build", "small", "--catalog", str(recipes / "catalog.yaml"), "--debian", "follow",
                             "--log", str(user_tmp / "b.log"), "--archive", str(archive),
                             extra_env={"HVDFLOW_CACHE": str(cache), "HVDFLOW_PROGRESS_SECONDS": "1"}, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr + (user_tmp / "b.log").read_text()[-3000:]
    assert "hvdflow: building without root, in a user namespace: unshare --map-auto --map-root-user" in built.stderr
    build_log = (user_tmp / "b.log").read_text()
    assert "mmdebstrap --mode=unshare" in build_log
    # progress: each phase in the build's log, and on stderr (not a terminal: plain lines) the phase and, while the
    # root filesystem is made (about 20 s), how many of the manifest's Debian packages are in
    phases = [line for line in build_log.splitlines() if line.startswith("hvdflow: the ")]
    assert [p.split(":")[1].strip() for p in phases] == [
        "the toolchain of Debian bookworm", "the wheelhouse", "the root filesystem", "the layers"], phases
    packages = len(read_debian_manifest(recipes / "small" / "debian-packages.txt"))
    assert any("] building small: running for " in line and f" of {packages} Debian packages installed" in line
               for line in built.stderr.splitlines()), built.stderr
    second = json.loads(built.stdout.splitlines()[-1])
    assert second["layout"] != str(first.layout)
    assert second["manifest_digest"] == first.manifest_digest
    left = [p for p in cache.rglob("*") if p.lstat().st_uid != hpc_user.uid]
    assert left == [], f"the rootless build left files of a subordinate id, which its user cannot remove: {left[:5]}"
    assert not list((cache / "images").glob(".rootfs-*")), "the build's root filesystem stayed"
    assert archive.stat().st_uid == hpc_user.uid and not list(user_tmp.glob(".small.tar-*"))
    manifest = json.loads(_blob(first, first.manifest_digest).read_text())
    config = json.loads(_blob(first, manifest["config"]["digest"]).read_text())
    assert config["created"] == "2026-11-25T00:00:00Z"
    assert config["config"]["Labels"]["io.hvdflow.python"].startswith("3.11")
    names = []
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=gzip.open(_blob(first, layer["digest"]))) as tar:
            for member in tar:
                names.append(member.name)
                assert member.mtime <= EPOCH, f"{member.name}: mtime {member.mtime} after the recipe's epoch"
    assert "etc/resolv.conf" not in names and "etc/hostname" not in names, "the building host's files stayed"
    assert any(n.startswith("usr/local/lib/python3.11/dist-packages/six") for n in names), "six was not installed"
    assert not any("hvdflow-pins" in n for n in names), "the apt pins stayed in the image"

    # the user's archive, loaded as on a site with no registry (`registry: none`): a real image without Horovod,
    # TensorFlow or numpy, whose `hvdflow image check` names each part and what it blocks
    where = ["--catalog", str(recipes / "catalog.yaml"), "--udocker-dir", str(user_tmp / "udocker")]
    loaded = hpc_user.hvdflow("image", "load", "small", str(archive), *where, timeout=600)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    assert json.loads(loaded.stdout)["digest"] == first.manifest_digest
    # an image hvdflow did not build carries no proot of its own: the host's runs it, as `proot: host` in a profile
    check = ["image", "check", "small", *where, "--registry", "none", "--proot", "host"]
    refused = hpc_user.hvdflow(*check, timeout=600)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "hvdflow: error: image small cannot run these jobs: " in refused.stderr
    marked = {line.split()[1] for line in refused.stdout.splitlines() if line.startswith("!")}
    assert marked == {"numpy", "tensorflow", "tf.keras", "horovod"}, refused.stdout
    assert "horovod is ModuleNotFoundError: No module named 'horovod' (needs >= 0.28; blocks training)" in refused.stderr
    assert next(line for line in refused.stdout.splitlines() if line.split()[0] == "python").split()[1].startswith("3.11")
    facts = list((user_tmp / "udocker" / ".hvdflow" / "checks").glob("*.json"))
    assert [f.stem for f in facts] == [first.manifest_digest.split(":", 1)[1]], "the probe's facts are kept by digest"


def test_a_debian_version_the_mirror_no_longer_serves_fails_the_build_naming_it(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "tests" / "recipes", recipes)
    manifest = recipes / "small" / "debian-packages.txt"
    lines = manifest.read_text().splitlines()
    pip_line = next(i for i, line in enumerate(lines) if line.startswith("python3-pip "))
    lines[pip_line] = "python3-pip 0.0-hvdflow-gone"
    manifest.write_text("\n".join(lines) + "\n")
    cache = tmp_path / "cache"
    with pytest.raises(BuildError) as refused:
        _build(cache, tmp_path / "build.log", monkeypatch, recipes / "catalog.yaml", debian="check")
    message = str(refused.value)
    assert "python3-pip: pinned 0.0-hvdflow-gone, the mirror gave " in message
    assert "(the pinned version is gone from it)" in message and str(manifest) in message
    assert "hvdflow image build NAME --debian pin" in message
    images = cache / "images"
    assert not images.exists() or list(images.iterdir()) == [], "a refused build left a layout or its rootfs behind"
