"""Benchmark: a rank killed mid-epoch, elastic against checkpoint + retry, side by side.

Run as the ordinary user in a pipeline working directory after the demo (the image pulled, the digits prepared):

    PYTHONPATH=src python benchmarks/elastic.py --reps 3

Each repetition trains the digits MLP on 3 ranks of this machine twice, and SIGKILLs rank 1 after step 3 of epoch 3
in both (the kill's time is the injected failure's marker file, written just before it):

- ``elastic`` (``elastic: {min_ranks: 1}``, a cooldown longer than the run): the others roll back to epoch 2's end and
  go on with 2 ranks. Seconds from the kill to the new membership's first epoch beginning (the end of that epoch less
  its own wall time), and the steps lost (done in the failed epoch, rolled back).
- ``retry`` (a fixed 3 ranks): the launch fails, and a second launch (what the rule's ``retries`` do, without the
  queue wait a cluster adds) resumes from the epoch-2 checkpoint. Seconds from the kill to the resumed run's first
  step, and the steps lost (since that checkpoint).

Prints every run, then medians; ``--figure PNG`` draws the last elastic run's membership and throughput (the report's
figure). Figures, not assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from demo_tree import add_tree_options, tree_runtime
from hvdflow.config.experiment import TrainSpec
from hvdflow.errors import LaunchError
from hvdflow.launch.elastic import read_events, timeline
from hvdflow.launch.request import ElasticSettings
from hvdflow.pipeline.plots import plot_membership
from hvdflow.pipeline.resume import identity_of
from hvdflow.pipeline.stages import train
from hvdflow.runtime import Runtime

KILL = "1:3.3:kill:once"
"""Rank 1, after step 3 of epoch 3: 3 steps of work since epoch 2's end (the checkpoint and the elastic commit)."""


def _train(runtime: Runtime, spec: TrainSpec, dataset: Path, out: Path,
           elastic: ElasticSettings | None) -> list[dict[str, Any]]:
    identity = identity_of(asdict(spec), "benchmark", dataset / "index.json")
    return train(runtime, "gloo", spec, dataset, out, out / "logs", identity, fail=KILL,
                 progress=out / "progress.log", elastic=elastic)


def _kill(out: Path) -> tuple[float, int, int]:
    """When the rank was killed, and where: (unix time, epoch counted from 1, steps done in it), from the marker."""
    marker = out / "checkpoints" / ".injected-failure"
    match = re.fullmatch(r"at step (\d+) of epoch (\d+)\n", marker.read_text())
    assert match, marker.read_text()
    return marker.stat().st_mtime, int(match.group(2)), int(match.group(1))


def elastic_run(runtime: Runtime, spec: TrainSpec, dataset: Path, out: Path) -> dict[str, float]:
    """Kill to the first epoch on the new count, and steps lost, of one elastic run (its timeline in
    ``out/elastic.json``, as the run record has it)."""
    _train(runtime, replace(spec, elastic={"min_ranks": 1}), dataset, out, ElasticSettings(1, spec.ranks, 3600))
    events = read_events(out / "logs")
    (out / "elastic.json").write_text(json.dumps({"elastic": {"min_ranks": 1, "max_ranks": spec.ranks,
                                                              **timeline(events)}}))
    changed = [e for e in events if e["event"] == "membership"][1]
    first_epoch = next(e for e in events if e["event"] == "epoch" and e["unix"] > changed["unix"])
    began = float(first_epoch["unix"]) - float(first_epoch["seconds"])
    killed, epoch, step = _kill(out)
    assert changed["epoch"] == epoch - 1 and changed["step"] == 0, changed  # rolled back to the epoch's start
    return {"to_first_step": began - killed, "lost_steps": float(step)}


def retry_run(runtime: Runtime, spec: TrainSpec, dataset: Path, out: Path) -> dict[str, float]:
    """Kill to the resumed run's first step, and steps lost, of the checkpoint + retry path."""
    try:
        _train(runtime, spec, dataset, out, None)
        raise AssertionError("the injected failure did not fail the run")
    except LaunchError:
        pass
    result = _train(runtime, spec, dataset, out, None)[0]
    killed, epoch, step = _kill(out)
    resumed = result.resumed_from
    lost = (epoch - 1 - resumed["epoch"]) * result.steps_per_epoch + step - resumed["step"]
    return {"to_first_step": float(result.first_step_unix) - killed, "lost_steps": float(lost)}


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    add_tree_options(parser)
    parser.add_argument("--dataset", type=Path, default=Path("resources/datasets/digits"))
    parser.add_argument("--figure", type=Path, help="draw the last elastic run's membership here (PNG)")
    args = parser.parse_args()
    runtime = tree_runtime(args)
    dataset = args.dataset.resolve()
    spec = TrainSpec(ranks=3, model="mlp", hidden_units=64, epochs=args.epochs, batch_size=32, learning_rate=0.01,
                     momentum=0.9, warmup_epochs=1, seed=1234)
    rows: dict[str, list[dict[str, float]]] = {"elastic": [], "retry": []}
    print(f"{'path':8} {'rep':>3} {'kill to first step on the new count, s':>40} {'steps lost':>10}")
    with tempfile.TemporaryDirectory(prefix="hvdflow-bench-") as tmp:
        for rep in range(args.reps):
            for path, run in (("elastic", elastic_run), ("retry", retry_run)):
                row = run(runtime, spec, dataset, Path(tmp) / f"{path}-{rep}")
                rows[path].append(row)
                print(f"{path:8} {rep:>3} {row['to_first_step']:40.1f} {row['lost_steps']:10.0f}", flush=True)
        if args.figure:
            plot_membership(Path(tmp) / f"elastic-{args.reps - 1}" / "elastic.json", args.figure, "benchmark")
    print()
    for path, values in rows.items():
        print(f"median {path}: {statistics.median(v['to_first_step'] for v in values):.1f} s from the kill to the "
              f"first step on the new count, {statistics.median(v['lost_steps'] for v in values):.0f} steps lost")


if __name__ == "__main__":
    main()
