"""The setup scripts leave the machine as they found it, also when an install fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

SYSTEM_POLICY = Path("/usr/sbin/policy-rc.d")


@pytest.mark.parametrize("where", ["system", "absent"])
def test_a_failed_package_install_leaves_no_policy_rc_d_behind(where: str, tmp_path: Path) -> None:
    # "system": the real path, which may hold a policy of the machine's own (Docker's base images ship one) that must
    # stay; "absent": a path where none exists, so the script makes its own and must remove it
    policy = SYSTEM_POLICY if where == "system" else tmp_path / "policy-rc.d"
    before = policy.exists()
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail; source {REPO}/scripts/lib.sh; "
                                         "apt_install_missing hvdflow-no-such-package"],
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                          env={**os.environ, "HVDFLOW_POLICY_RC_D": str(policy)})
    assert proc.returncode != 0, "installing a package that does not exist must fail"
    assert "hvdflow-no-such-package" in proc.stdout + proc.stderr
    assert policy.exists() == before


def test_the_demo_tree_copy_keeps_the_lock_across_runs_and_refreshes_the_rest(tmp_path: Path) -> None:
    # scripts/demo.sh copies the checkout into the demo user's tree on every run; the digest lock its pulls wrote
    # there must survive (issue 15: it was deleted on every run), while the code is refreshed
    source, dest = tmp_path / "checkout", tmp_path / "demo-tree"
    (source / "containers").mkdir(parents=True)
    (source / "containers" / "catalog.yaml").write_text("images: {}\n")
    (source / "src").mkdir()
    (source / "src" / "code.py").write_text("v1\n")
    lock = dest / "containers" / "images.lock.yaml"
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()

    def copy() -> None:
        subprocess.run(["bash", "-c", f"set -euo pipefail; source {REPO}/scripts/lib.sh; "
                                      "copy_tree_keeping_lock \"$0\" containers src absent-part", str(dest)],
                       cwd=source, check=True, timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(scratch)})
        assert list(scratch.iterdir()) == [], "the kept copy of the lock was left behind"

    dest.mkdir()
    copy()
    assert not lock.exists() and (dest / "src" / "code.py").read_text() == "v1\n"
    lock.write_text("images:\n  hvdflow-cpu: {digest: 'sha256:aaaa', reference: 'x:1'}\n")  # the first run's pull
    (dest / "containers" / "stale.yaml").write_text("left from an older checkout\n")
    for version in ("v2", "v3"):  # two more demo runs, the code changed each time
        (source / "src" / "code.py").write_text(f"{version}\n")
        copy()
        assert lock.read_text() == "images:\n  hvdflow-cpu: {digest: 'sha256:aaaa', reference: 'x:1'}\n"
        assert (dest / "src" / "code.py").read_text() == f"{version}\n"
        assert not (dest / "containers" / "stale.yaml").exists() and not (dest / "absent-part").exists()
