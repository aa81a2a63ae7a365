"""Reproducible image builds, on the small recipe (tests/recipes/small): the same recipe built twice, from two empty
caches, gives one digest; a Debian version the mirror no longer serves is named, and nothing that looks built stays;
`hvdflow image check` on that image (no Horovod, TensorFlow nor numpy) names each missing part.

Root (mmdebstrap, chroot) and Debian's and PyPI's servers, like the hvdflow-cpu build; about a minute a build."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, HpcUser, Registry, _chown_tree
from hvdflow.images.build.commands import BuildError
from hvdflow.images.build.image import BuiltImage, build_image, push_image
from hvdflow.images.catalog import load_catalog

pytestmark = [pytest.mark.image]

CATALOG = REPO / "tests" / "recipes" / "catalog.yaml"
EPOCH = 1795564800  # the small recipe's source_date_epoch


def _build(cache: Path, log: Path, monkeypatch: pytest.MonkeyPatch, catalog: Path = CATALOG,
           debian: str = "follow") -> BuiltImage:
    monkeypatch.setenv("HVDFLOW_CACHE", str(cache))
    return build_image(load_catalog(catalog)["small"], log, debian)


def _blob(image: BuiltImage, digest: str) -> Path:
    return image.layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def test_the_small_recipe_built_twice_from_empty_caches_gives_one_digest_and_image_check_names_what_it_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: Registry, hpc_user: HpcUser, user_tmp: Path) -> None:
    # "follow": where Debian's mirror has moved on since the manifest, both builds follow it alike (the strict check:
    # the next test); the two builds share nothing but the recipe
    first = _build(tmp_path / "cache-a", tmp_path / "a.log", monkeypatch)
    second = _build(tmp_path / "cache-b", tmp_path / "b.log", monkeypatch)
    assert first.layout != second.layout
    assert first.manifest_digest == second.manifest_digest
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

    # a real image without Horovod, TensorFlow or numpy: `hvdflow image check` names each part and what it blocks
    push_image(first, registry.url, "hvdflow-tests/small", "1", tmp_path / "push.log")
    recipes = user_tmp / "recipes"
    shutil.copytree(REPO / "tests" / "recipes", recipes)
    _chown_tree(recipes, hpc_user.uid, hpc_user.gid)
    # an image hvdflow did not build carries no proot of its own: the host's runs it, as `proot: host` in a profile
    check = ["image", "check", "small", "--catalog", str(recipes / "catalog.yaml"), "--registry", registry.url,
             "--udocker-dir", str(user_tmp / "udocker"), "--proot", "host"]
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
