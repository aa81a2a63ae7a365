"""Benchmark: from ``snakemake`` start to the first training step of a Slurm run, and where the time goes.

Run as the ordinary user in a pipeline working directory whose config has the experiment (the image pulled and the
dataset prepared already, so only the train job runs), with the test bed up (``hvdflow testbed start``, root) and
its configuration named as that command prints:

    export SLURM_CONF=/var/lib/hvdflow-testbed/etc/slurm.conf
    PYTHONPATH=src python benchmarks/slurm_startup.py --experiment cluster --reps 2

Each repetition forces the train job to run again with ``snakemake --profile profiles/testbed``, then reads the
job's times from ``sacct`` (submit, start, end) and the ranks' first-step times from the run record. Prints every
run and the medians. Figures, not assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from datetime import datetime
from pathlib import Path


def sacct_times(job: str) -> tuple[float, float, float]:
    """Submit, start and end of a Slurm job as Unix times (local time zone), from the accounting database."""
    line = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job, "-o", "Submit,Start,End"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return tuple(datetime.fromisoformat(t).timestamp() for t in line.split("|"))  # type: ignore[return-value]


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="cluster")
    parser.add_argument("--profile", default="profiles/testbed")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    record_path = Path("results") / args.experiment / "run.json"
    columns = ("to first step", "to job start", "job start to first step", "staging", "snakemake total")
    print(f"{'rep':>3} " + " ".join(f"{c:>24}" for c in columns))
    rows = []
    for rep in range(args.reps):
        start = time.time()
        subprocess.run(["snakemake", "--profile", args.profile, "--forcerun", "train", str(record_path)], check=True,
                       capture_output=True, env=os.environ)
        total = time.time() - start
        record = json.loads(record_path.read_text())
        _, job_start, _ = sacct_times(record["slurm"]["job_id"])
        first_step = min(float(r["first_step_unix"]) for r in record["ranks"])
        staging = max(s["seconds"] for s in record["slurm"]["staging"].values())
        row = (first_step - start, job_start - start, first_step - job_start, staging, total)
        rows.append(row)
        print(f"{rep:>3} " + " ".join(f"{v:>22.1f} s" for v in row), flush=True)
    print("median " + ", ".join(f"{c} {statistics.median(r[i] for r in rows):.1f} s" for i, c in enumerate(columns)))


if __name__ == "__main__":
    main()
