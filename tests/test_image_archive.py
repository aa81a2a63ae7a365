"""OCI archives read back before anything is loaded: the digest kept, every blob checked, foreign formats named."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from helpers import build_tiny_layout
from hvdflow.errors import ImageError
from hvdflow.images.archive import read_archive


def _tar(layout: Path, out: Path) -> Path:
    """An archive as ``tar -C LAYOUT -cf OUT .`` writes it (members named ``./...``)."""
    with tarfile.open(out, "w") as tar:
        tar.add(layout, arcname=".")
    return out


def _layer(layout: Path, digest: str) -> Path:
    manifest = json.loads((layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_text())
    return layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].split(":", 1)[1]


def test_an_archive_keeps_the_manifest_digest_and_its_name(tmp_path: Path) -> None:
    image = build_tiny_layout(tmp_path / "layout", "1.0", "archived")
    archived = read_archive(_tar(image.layout, tmp_path / "image.tar"), "test/tiny")
    assert archived.manifest.digest == image.manifest_digest
    assert archived.ref_name == "1.0"
    assert archived.manifest.repository == "test/tiny"
    assert archived.manifest.registry_url == f"oci-archive:{(tmp_path / 'image.tar').resolve()}"
    assert len(archived.manifest.layers) == 1


def test_a_changed_byte_in_a_layer_is_named_with_the_archive(tmp_path: Path) -> None:
    image = build_tiny_layout(tmp_path / "layout", "1.0", "tampered")
    layer = _layer(image.layout, image.manifest_digest)
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    layer.write_bytes(bytes(data))
    archive = _tar(image.layout, tmp_path / "image.tar")
    with pytest.raises(ImageError) as refused:
        read_archive(archive, "test/tiny")
    assert f"{archive}: blob sha256:{layer.name} has content of digest sha256:" in str(refused.value)


def test_a_missing_blob_and_a_changed_manifest_are_named(tmp_path: Path) -> None:
    image = build_tiny_layout(tmp_path / "layout", "1.0", "incomplete")
    layer = _layer(image.layout, image.manifest_digest)
    layer.unlink()
    with pytest.raises(ImageError, match=f"blob sha256:{layer.name} is missing from the archive"):
        read_archive(_tar(image.layout, tmp_path / "missing.tar"), "test/tiny")

    other = build_tiny_layout(tmp_path / "other", "1.0", "manifest edited")
    manifest = other.layout / "blobs" / "sha256" / other.manifest_digest.split(":", 1)[1]
    manifest.write_text(manifest.read_text().replace('"schemaVersion":2', '"schemaVersion": 2'))
    with pytest.raises(ImageError, match=f"served image {other.manifest_digest} .* with content of digest sha256:"):
        read_archive(_tar(other.layout, tmp_path / "edited.tar"), "test/tiny")


def test_a_legacy_docker_save_archive_and_a_non_archive_are_named(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "manifest.json").write_text('[{"Config": "c.json", "RepoTags": ["x:1"], "Layers": []}]')
    with pytest.raises(ImageError, match="legacy `docker save` archive: `hvdflow image load` takes it"):
        read_archive(_tar(legacy, tmp_path / "legacy.tar"), "test/tiny")
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"not a tar at all")
    with pytest.raises(ImageError, match=f"{garbage}: not a readable tar archive"):
        read_archive(garbage, "test/tiny")


def test_of_several_images_the_one_named_is_read(tmp_path: Path) -> None:
    first = build_tiny_layout(tmp_path / "first", "a", "first")
    second = build_tiny_layout(tmp_path / "second", "b", "second")
    both = tmp_path / "both"
    shutil.copytree(first.layout, both)
    shutil.copytree(second.layout / "blobs", both / "blobs", dirs_exist_ok=True)
    index = json.loads((first.layout / "index.json").read_text())
    index["manifests"] += json.loads((second.layout / "index.json").read_text())["manifests"]
    (both / "index.json").write_text(json.dumps(index))
    archive = _tar(both, tmp_path / "both.tar")
    assert read_archive(archive, "test/tiny", "b").manifest.digest == second.manifest_digest
    with pytest.raises(ImageError, match="holds 2 images \\(named a, b\\); none is uniquely named 'c'"):
        read_archive(archive, "test/tiny", "c")
