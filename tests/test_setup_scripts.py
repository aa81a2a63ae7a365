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
