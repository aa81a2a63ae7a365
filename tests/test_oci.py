"""The OCI writer: deterministic layers, one owner per path, hard links kept, and a layout skopeo accepts."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from hvdflow.images.build.oci import ImageConfig, LayerSpec, prefix_filter, write_oci_layout


def _tree(root: Path) -> Path:
    (root / "usr" / "local" / "lib").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "tool").write_text("#!/bin/sh\necho hi\n")
    (root / "usr" / "bin" / "tool").chmod(0o755)
    (root / "usr" / "bin" / "alias").symlink_to("tool")
    (root / "usr" / "local" / "lib" / "big.bin").write_bytes(os.urandom(4096))
    os.link(root / "usr" / "local" / "lib" / "big.bin", root / "usr" / "local" / "lib" / "same.bin")
    return root


LAYERS = [LayerSpec("system", prefix_filter(["usr/local"], invert=True)), LayerSpec("python", prefix_filter(["usr/local"]))]


def _members(layout: Path, digest: str) -> dict[str, tarfile.TarInfo]:
    data = gzip.decompress((layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_same_tree_gives_same_digests_and_layers_split_by_prefix(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    first = write_oci_layout(root, LAYERS, ImageConfig(), tmp_path / "a", "t", epoch=1_700_000_000)
    second = write_oci_layout(root, LAYERS, ImageConfig(), tmp_path / "b", "t", epoch=1_700_000_000)
    assert first.digest == second.digest
    manifest = json.loads((tmp_path / "a" / "blobs" / "sha256" / first.digest[7:]).read_bytes())
    system, python = (_members(tmp_path / "a", layer["digest"]) for layer in manifest["layers"])
    assert set(system) == {"usr", "usr/bin", "usr/bin/alias", "usr/bin/tool"}
    assert set(python) == {"usr/local", "usr/local/lib", "usr/local/lib/big.bin", "usr/local/lib/same.bin"}
    assert system["usr/bin/alias"].issym() and system["usr/bin/alias"].linkname == "tool"
    assert system["usr/bin/tool"].mode == 0o755
    assert python["usr/local/lib/same.bin"].islnk() and python["usr/local/lib/same.bin"].linkname == "usr/local/lib/big.bin"
    config = json.loads((tmp_path / "a" / "blobs" / "sha256" / manifest["config"]["digest"][7:]).read_bytes())
    assert len(config["rootfs"]["diff_ids"]) == 2


def test_mtimes_are_clamped_to_the_epoch(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    blob = write_oci_layout(root, LAYERS, ImageConfig(), tmp_path / "a", "t", epoch=1000)
    manifest = json.loads((tmp_path / "a" / "blobs" / "sha256" / blob.digest[7:]).read_bytes())
    assert {m.mtime for m in _members(tmp_path / "a", manifest["layers"][0]["digest"]).values()} == {1000}


def test_a_path_in_no_layer_is_refused_before_writing(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    with pytest.raises(ValueError, match=r"usr/local falls in no layer"):
        write_oci_layout(root, LAYERS[:1], ImageConfig(), tmp_path / "out", "t", epoch=0)
    assert not (tmp_path / "out").exists()


def test_skopeo_reads_the_layout(tmp_path: Path) -> None:
    root = _tree(tmp_path / "root")
    blob = write_oci_layout(root, LAYERS, ImageConfig(env=["A=1"], labels={"k": "v"}), tmp_path / "img", "v1", epoch=0)
    proc = subprocess.run(["skopeo", "inspect", f"oci:{tmp_path / 'img'}:v1"], capture_output=True, text=True, check=True)
    info = json.loads(proc.stdout)
    assert info["Digest"] == blob.digest
    assert info["Labels"] == {"k": "v"} and info["Env"] == ["A=1"] and len(info["Layers"]) == 2
