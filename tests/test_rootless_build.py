"""Who may build images without root: the checks ``hvdflow image build`` makes before it enters a user namespace,
and which mmdebstrap mode a build takes (the builds themselves: tests/test_image_build.py, as root and as the
ordinary user, one digest)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from hvdflow.images.build.rootless import mmdebstrap_mode, namespace_root, rootless_problem

ME = pwd.getpwuid(os.geteuid()).pw_name


def _ids(tmp_path: Path, subuid: str, subgid: str) -> tuple[Path, Path]:
    (tmp_path / "subuid").write_text(subuid)
    (tmp_path / "subgid").write_text(subgid)
    return tmp_path / "subuid", tmp_path / "subgid"


def test_a_user_with_65536_subordinate_ids_of_each_kind_may_build_without_root(tmp_path: Path) -> None:
    assert rootless_problem(*_ids(tmp_path, f"other:100000:65536\n{ME}:165536:65536\n",
                                  f"{os.geteuid()}:165536:65536\n")) is None


@pytest.mark.parametrize("subuid, subgid, named", [
    ("other:100000:65536\n", f"{ME}:165536:65536\n", "subuid"),
    (f"{ME}:165536:65536\n", f"{ME}:165536:1000\n", "subgid"),  # too few ids for Debian's users (nobody: 65534)
    (f"{ME}:165536:65536\n", "", "subgid"),
])
def test_a_missing_or_short_range_of_subordinate_ids_is_named_with_the_command_that_adds_one(
        tmp_path: Path, subuid: str, subgid: str, named: str) -> None:
    problem = rootless_problem(*_ids(tmp_path, subuid, subgid))
    assert problem is not None
    what, fix = problem
    assert what == f"{tmp_path / named} gives {ME} no range of 65536 subordinate ids"
    assert f"usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {ME}" in fix


def test_real_root_builds_with_mmdebstraps_own_mode_and_a_namespaces_root_with_its_unshare_mode(tmp_path: Path) -> None:
    assert os.geteuid() == 0 and not namespace_root() and mmdebstrap_mode() == []
    # root of a namespace that maps this (root) user to root is still real root: same ids, same mode
    probe = "from hvdflow.images.build.rootless import mmdebstrap_mode; print(mmdebstrap_mode())"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    same = subprocess.run(["unshare", "--map-root-user", sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, check=True)
    assert same.stdout.strip() == "[]"
    # the map `unshare --map-auto --map-root-user` gives an ordinary user (uid 1003, subordinate ids from 100000)
    (tmp_path / "uid_map").write_text("         0       1003          1\n         1     100000      65535\n")
    assert namespace_root(tmp_path / "uid_map")
