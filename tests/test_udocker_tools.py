"""udocker's offline engine tarball and the proot wrapper that drops ``-k``."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from hvdflow.errors import UdockerError
from hvdflow.images.udocker_tools import HOST_PROOT, TOOLS_RELEASE, build_tools_tarball, engine_binary, engine_wrapper

WRAPPER = Path(__file__).resolve().parents[1] / "src" / "hvdflow" / "images" / "udocker_tools" / "proot"


def test_tarball_has_the_wrapper_and_version(tmp_path: Path) -> None:
    path = build_tools_tarball(tmp_path)
    assert build_tools_tarball(tmp_path) == path  # built once
    with tarfile.open(path) as tar:
        names = {m.name: m for m in tar.getmembers()}
        assert names["udocker_dir/bin/proot"].mode == 0o755
        assert tar.extractfile("udocker_dir/lib/VERSION").read().decode().strip() == TOOLS_RELEASE  # type: ignore[union-attr]


def _wrapped_args(tmp_path: Path, *args: str) -> list[str]:
    fake = tmp_path / "fake-proot"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    out = subprocess.run([str(WRAPPER), *args], env={**os.environ, "HVDFLOW_PROOT": str(fake)},
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_wrapper_drops_k_before_root_only(tmp_path: Path) -> None:
    got = _wrapped_args(tmp_path, "-k", "6.1.0", "-v", "1", "-r", "/ROOT", "-w", "/", "prog", "-k", "keep")
    assert got == ["-v", "1", "-r", "/ROOT", "-w", "/", "prog", "-k", "keep"]


def test_wrapper_keeps_arguments_with_spaces(tmp_path: Path) -> None:
    assert _wrapped_args(tmp_path, "-r", "/R", "sh", "-c", "echo a  b") == ["-r", "/R", "sh", "-c", "echo a  b"]


def test_real_proot_runs_through_the_wrapper() -> None:
    proc = subprocess.run([str(WRAPPER), "-k", "6.1.0", "-r", "/", "/bin/sh", "-c", "echo inside"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "inside"


def test_the_engine_is_the_images_proot_or_the_hosts_and_a_missing_one_is_named(tmp_path: Path) -> None:
    with pytest.raises(UdockerError, match=r"container c1 carries no proot at /opt/hvdflow/bin/proot .* set proot: host"):
        engine_binary(tmp_path, "c1", "image")
    carried = tmp_path / "containers" / "c1" / "ROOT" / "opt" / "hvdflow" / "bin" / "proot"
    carried.parent.mkdir(parents=True)
    carried.write_bytes(b"")
    assert engine_binary(tmp_path, "c1", "image") == carried
    assert engine_binary(tmp_path, "c1", "host") == HOST_PROOT  # Debian's package, which the suite installs


def test_the_engine_wrapper_runs_its_own_proot_with_no_environment(tmp_path: Path) -> None:
    # udocker clears the environment before it runs proot: the wrapper must know its binary by itself
    fake = tmp_path / "the proot"
    fake.write_text('#!/bin/sh\necho "fake proot $*"\n')
    fake.chmod(0o755)
    wrapper = engine_wrapper(tmp_path / "state", fake)
    assert engine_wrapper(tmp_path / "state", fake) == wrapper and wrapper.stat().st_mode & 0o777 == 0o755
    out = subprocess.run([str(wrapper), "--kill-on-exit", "-k", "4.8.13", "-r", "/root", "cat"], env={},
                         capture_output=True, text=True, check=True).stdout
    assert out == "fake proot --kill-on-exit -r /root cat\n"
    assert engine_wrapper(tmp_path / "state", HOST_PROOT) != wrapper  # one wrapper per binary


def test_the_kernel_choosing_variables_reach_the_container_only_when_set(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # ONEDNN_MAX_CPU_ISA=AVX2 gave an AVX-512 machine the AVX2 machines' weights (docs/reproducibility.md)
    from hvdflow.runtime.udocker.client import Udocker
    from hvdflow.runtime.udocker.runtime import UdockerRuntime

    runtime = UdockerRuntime(Udocker(tmp_path, allow_root=True), "c1")
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert not [a for a in runtime.command(["python3", "-V"], {}, []) if "ONEDNN" in a]
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    argv = runtime.command(["python3", "-V"], {"HOROVOD_RANK": "0"}, [])
    assert "--env=ONEDNN_MAX_CPU_ISA=AVX2" in argv and "--env=HOROVOD_RANK=0" in argv
    assert not [a for a in argv if "TF_ENABLE_ONEDNN_OPTS" in a]
