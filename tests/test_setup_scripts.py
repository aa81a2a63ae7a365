"""The setup scripts leave the machine as they found it, also when an install fails."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from conftest import REPO, HpcUser

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


def documented_first_commands() -> list[tuple[str, str]]:
    """The first command of every ``bash`` block of the README and of the documentation site's pages, with the page
    and the heading it stands under (``README.md: Two commands``; the text before a ``&&`` or ``;`` and before a
    comment)."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        heading, lines = "", page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("#"):
                heading = line.lstrip("# ").strip()
            if line.strip() == "```bash":
                first = next(text for text in lines[i + 1:] if text.strip() and not text.lstrip().startswith("#"))
                command = re.split(r"\s+#|&&|;", first)[0].strip()
                found.append((f"{page.relative_to(REPO)}: {heading}", command))
    return found


def as_checked(command: str) -> Optional[list[str]]:
    """How the test runs a documented command: a dry run for Snakemake, ``--help`` for a long command, as written for
    a short one; None for the two commands of the README's top (scripts/demo.sh and the suite run them)."""
    words = shlex.split(command)
    if words[0] == "bash" and words[1].startswith("scripts/"):
        return None
    if words[0] == "snakemake":
        return [*words, "--dry-run"]
    if words[0] in ("hvdflow", "python") or words[0].startswith("PYTHONPATH="):
        return [*words, "--help"]
    return words


def test_every_documented_command_block_starts_with_a_command_that_works_as_typed(hpc_user: HpcUser,
                                                                                  user_tmp: Path) -> None:
    """Issue 30: `hvdflow rerun …` was `command not found` for the demo's user. As the suite's user, in a copy of the
    checkout with the venv scripts/lib.sh made active, each block's first command of the README and of every page of
    the documentation site runs (dry or --help where long)."""
    tree = user_tmp / "tree"   # the checkout's files, as a clone has them
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    subprocess.run(["chown", "-R", f"{hpc_user.uid}:{hpc_user.gid}", str(tree)], check=True)
    commands = documented_first_commands()
    headings = {heading for heading, _ in commands}
    assert {"README.md: On your cluster", "docs/tutorials/reruns.md: Rerunning a recorded run",
            "docs/tutorials/first-cluster.md: Your first cluster", "docs/tutorials/first-run.md: The pipeline",
            "docs/tutorials/benchmarking.md: Benchmarking your cluster"} <= headings, commands
    path = f"{hpc_user.venv}/bin:/usr/bin:/bin"
    made = [hpc_user.home / "hvdflow-venv", hpc_user.home / "hvdflow-docs"]   # what commands make in the user's home
    assert not any(p.exists() for p in made)
    checked = 0
    try:
        checked = _run_each(commands, hpc_user, tree, path)
    finally:
        for p in made:
            shutil.rmtree(p, ignore_errors=True)
    assert checked >= 12, commands
    # the command is the checkout's own: outside any checkout it says what it looked for
    outside = hpc_user.run(["bash", "-c", "cd / && hvdflow --help"], extra_env={"PATH": path})
    assert outside.returncode == 2 and "no hvdflow checkout at or above /" in outside.stderr, outside.stderr


def _run_each(commands: list[tuple[str, str]], hpc_user: HpcUser, tree: Path, path: str) -> int:
    """Run each documented command as :func:`as_checked` says, as the user in ``tree``; how many ran."""
    checked = 0
    for heading, command in commands:
        argv = as_checked(command)
        if argv is None:
            continue
        assignments = [w for w in argv if re.fullmatch(r"[A-Z_]+=\S*", w)]
        words = [re.sub(r"^~(?=/|$)", str(hpc_user.home), w) for w in argv[len(assignments):]]
        proc = hpc_user.run(["bash", "-c", f"cd {shlex.quote(str(tree))} && {' '.join(assignments)} exec \"$@\"",
                             "readme", *words], extra_env={"PATH": path, "VIRTUAL_ENV": str(hpc_user.venv),
                                                        "HVDFLOW_REGISTRY": "http://127.0.0.1:5000"},
                            timeout=600)
        assert proc.returncode == 0, f"{heading}: {command!r} as {words}:\n{proc.stdout}\n{proc.stderr}"
        if words[0] == "hvdflow":
            assert proc.stdout.startswith(f"usage: hvdflow {words[1]}"), proc.stdout[:300]
        checked += 1
    return checked
