"""The setup scripts leave the machine as they found it, also when an install fails."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
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


@dataclass(frozen=True)
class DocumentedBlock:
    """One ``bash`` block of the README or of a documentation page: where it stands and its commands as typed."""

    where: str                 # the page and the heading it stands under (``README.md: Two commands``)
    commands: tuple[str, ...]  # each command, split at ``&&`` and ``;``, its comment left out


def documented_blocks() -> list[DocumentedBlock]:
    """Every ``bash`` block of the README and of the documentation site's pages, in the order a reader meets them
    (the README first), with every command of each."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        heading, block, lines = "", None, page.read_text().splitlines()
        for line in lines:
            if block is None and line.startswith("#"):
                heading = line.lstrip("# ").strip()
            elif block is None and line.strip() == "```bash":
                block = []
            elif block is not None and line.strip().startswith("```"):
                found.append(DocumentedBlock(f"{page.relative_to(REPO)}: {heading}", tuple(block)))
                block = None
            elif block is not None:
                typed = re.split(r"(?:^|\s)#", line)[0]
                block += [part.strip() for part in re.split(r"&&|;", typed) if part.strip()]
    return found


PARSES = ("import sys; from hvdflow.cli import build_parser; "
          "print('parsed:', build_parser().parse_args(sys.argv[1:]).func.__name__)")
"""hvdflow's own parser over a documented command's words: every flag and choice exists (--help alone stops early)."""


def as_checked(command: str) -> Optional[str]:
    """The shell line the test runs for a documented command: a dry run for Snakemake; for hvdflow its words parsed by
    hvdflow's parser, then ``--help``; ``--help`` for another long command; a short one as written; None for
    ``bash scripts/…`` (the README's two commands: scripts/demo.sh and the suite run them) and for a Snakemake report,
    which needs a finished run (scripts/demo.sh types it, tests/test_pipeline.py makes one)."""
    line = re.sub(r"[\[\]]", "", command)   # `[--flag value]` marks an optional part
    words = shlex.split(line)
    assignments = [w for w in words if re.fullmatch(r"[A-Z_]+=\S*", w)]
    program, args = words[len(assignments)], words[len(assignments) + 1:]
    if program == "bash" and args[0].startswith("scripts/") or program == "snakemake" and "--report" in args:
        return None
    if program == "snakemake":
        return f"{line} --dry-run"
    if program == "hvdflow":
        return (f"python -c {shlex.quote(PARSES)} {' '.join(shlex.quote(w) for w in args)}\n"
                f"{line} --help | grep '^usage: hvdflow {args[0]}' >/dev/null")
    if program in ("python", "mkdocs") or program.endswith("/mkdocs"):
        return f"{line} --help >/dev/null"
    return line


def test_every_documented_command_works_as_typed(hpc_user: HpcUser, user_tmp: Path) -> None:
    """Issues 30 and 46: every command of every ``bash`` block of the README and of the documentation site runs as
    the suite's user types it, in a copy of the checkout, one shell per block (so `export PATH` holds for the block):
    the README's venv is made as it says and every later block runs with it on PATH; Snakemake dry, hvdflow's
    commands parsed by hvdflow's parser and shown with --help, other long commands --help. `--profile cluster` is
    the test bed's shipped profile, installed as the README says."""
    tree = user_tmp / "tree"   # the checkout's files, as a clone has them
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    subprocess.run(["chown", "-R", f"{hpc_user.uid}:{hpc_user.gid}", str(tree)], check=True)
    blocks = documented_blocks()
    headings = {block.where for block in blocks}
    assert {"README.md: On your cluster", "docs/tutorials/reruns.md: Rerunning a recorded run",
            "docs/tutorials/first-cluster.md: Your first cluster", "docs/tutorials/first-run.md: The pipeline",
            "docs/tutorials/benchmarking.md: Benchmarking your cluster"} <= headings, blocks
    made = [hpc_user.home / "hvdflow-venv", hpc_user.home / "hvdflow-docs", hpc_user.home / ".config" / "snakemake"]
    assert not any(p.exists() for p in made)   # what the commands make in the user's home
    checked = 0
    try:
        hpc_user.run([str(hpc_user.venv / "bin" / "python"), "-m", "hvdflow", "profile", "install", "testbed",
                      "--as", "cluster"], check=True, cwd=tree)
        checked = _run_blocks(blocks, hpc_user, tree)
    finally:
        for p in made:
            shutil.rmtree(p, ignore_errors=True)
    assert checked >= 35, blocks
    # the command is the checkout's own: outside any checkout it says what it looked for
    path = f"{hpc_user.venv}/bin:/usr/bin:/bin"
    outside = hpc_user.run(["bash", "-c", "cd / && hvdflow --help"], extra_env={"PATH": path})
    assert outside.returncode == 2 and "no hvdflow checkout at or above /" in outside.stderr, outside.stderr


def _run_blocks(blocks: list[DocumentedBlock], hpc_user: HpcUser, tree: Path) -> int:
    """Run each block's commands as :func:`as_checked` says, as the user in ``tree``, one shell per block; how many
    commands ran."""
    checked = 0
    for block in blocks:
        lines = [line for line in map(as_checked, block.commands) if line is not None]
        if not lines:
            continue
        script = "\n".join(["set -eo pipefail", "trap 'echo \"failed: $BASH_COMMAND\" >&2' ERR",
                            f"cd {shlex.quote(str(tree))}", *lines])
        proc = hpc_user.run(["bash", "-c", script],
                            extra_env={"PATH": f"{hpc_user.home}/hvdflow-venv/bin:/usr/bin:/bin",
                                       "HVDFLOW_REGISTRY": "http://127.0.0.1:5000"}, timeout=900)
        assert proc.returncode == 0, f"{block.where}:\n{script}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        checked += len(lines)
    return checked
