#!/usr/bin/env python3
"""Stand-ins for Slurm's client commands that record how they were called (for the golden command-line tests).

Installed under the names sbatch, squeue, sacct, sinfo, sacctmgr, sshare and scancel in a folder put first on PATH,
so Snakemake and its Slurm plugin run exactly as on a cluster. Every call is appended to
``$HVDFLOW_RECORDER_DIR/calls.jsonl`` as ``{"tool", "argv", "stdin"}``. ``sbatch`` answers job id 4242; ``sinfo``
lists one default partition; ``sacctmgr`` and ``sshare`` list the accounts in ``$HVDFLOW_RECORDER_ACCOUNTS``
(comma-separated); the status queries know no job, so the plugin keeps waiting until the test stops it.
"""

import json
import os
import sys


def main() -> int:
    tool = os.path.basename(sys.argv[0])
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    record = {"tool": tool, "argv": sys.argv[1:], "stdin": stdin}
    path = os.path.join(os.environ["HVDFLOW_RECORDER_DIR"], "calls.jsonl")
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")
    if tool == "sbatch":
        print("4242")
    elif tool == "sinfo":
        print("debug*")
    elif tool in ("sacctmgr", "sshare"):
        print("\n".join(os.environ.get("HVDFLOW_RECORDER_ACCOUNTS", "").split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
