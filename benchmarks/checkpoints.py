"""Benchmark: what full-state checkpoints cost, and how fast a stopped run is on disk and training again.

Run as the ordinary user in a pipeline working directory after the demo (the image pulled, the digits prepared):

    PYTHONPATH=src python benchmarks/checkpoints.py --reps 3 --epochs 6

For each model (the digits MLP and small-cnn), interleaved rep by rep so machine noise hits both alike:

- ``end``: a checkpoint after the last epoch only (``checkpoint_every`` = epochs); ``every``: one every epoch.
  Overhead = the seconds rank 0 spent saving / the seconds its epochs took (the trainer logs both), and the ratio
  of the two runs' wall times.
- ``stop``: rank 0 gets SIGUSR1 after step 5 of epoch 2; seconds from the signal to the checkpoint's files on disk.
- ``resume``: the stopped run started again; seconds from the launch to the first training step, against the same
  for a fresh start (``every``).

Prints every run, then medians. Figures, not assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from demo_tree import add_tree_options, tree_runtime
from hvdflow.config.experiment import TrainSpec
from hvdflow.errors import RunStopped
from hvdflow.pipeline.resume import identity_of
from hvdflow.pipeline.stages import train
from hvdflow.runtime import Runtime

SAVED = re.compile(r"hvdflow: checkpoint \S+ saved at .*, (\d+) bytes in ([\d.]+) s")


def _run(runtime: Runtime, spec: TrainSpec, dataset: Path, out: Path, fail: str | None = None) -> dict[str, Any]:
    """One training; its wall time, launch time, rank 0's result and what its progress log says of the saves."""
    progress = out / "progress.log"
    launched = time.time()
    started = time.perf_counter()
    identity = identity_of(asdict(spec), "benchmark", dataset / "index.json")
    try:
        result = train(runtime, "gloo", spec, dataset, out, out / "logs", identity, fail=fail,
                       progress=progress)[0].to_json()
    except RunStopped:
        result = {}
    saves = [(int(b), float(s)) for b, s in SAVED.findall(progress.read_text())]
    return {"wall": time.perf_counter() - started, "launched": launched, "result": result, "saves": saves}


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=["mlp", "small-cnn"])
    add_tree_options(parser)
    parser.add_argument("--dataset", type=Path, default=Path("resources/datasets/digits"))
    args = parser.parse_args()
    runtime = tree_runtime(args)
    dataset = args.dataset.resolve()
    rows: dict[str, list[dict[str, float]]] = {model: [] for model in args.models}
    print(f"{'model':10} {'rep':>3} {'ckpt bytes':>10} {'save s':>7} {'overhead':>8} {'wall every/end':>14} "
          f"{'signal->disk s':>14} {'to 1st step fresh/resumed s':>28}")
    with tempfile.TemporaryDirectory(prefix="hvdflow-bench-") as tmp:
        for rep in range(args.reps):
            for model in args.models:
                base = TrainSpec(ranks=args.ranks, model=model, hidden_units=64, epochs=args.epochs, batch_size=32,
                                 learning_rate=0.01, momentum=0.9, warmup_epochs=1, seed=1234)
                end = _run(runtime, TrainSpec(**{**asdict(base), "checkpoint_every": args.epochs}), dataset,
                           Path(tmp) / f"{model}-{rep}-end")
                every = _run(runtime, base, dataset, Path(tmp) / f"{model}-{rep}-every")
                stop_dir = Path(tmp) / f"{model}-{rep}-stop"
                _run(runtime, base, dataset, stop_dir, fail="0:2.5:signal")
                manifest = json.loads((stop_dir / "checkpoints" / "manifest.json").read_text())
                stopped = manifest["checkpoints"][-1]
                resumed = _run(runtime, base, dataset, stop_dir)
                save_seconds = sum(s for _, s in every["saves"])
                epoch_seconds = sum(every["result"]["epoch_seconds"])
                row = {"bytes": every["saves"][-1][0], "save": statistics.median(s for _, s in every["saves"]),
                       "overhead": save_seconds / epoch_seconds, "wall_ratio": every["wall"] / end["wall"],
                       "signal_to_disk": stopped["unix"] - stopped["state"]["signal_unix"],
                       "fresh_first_step": every["result"]["first_step_unix"] - every["launched"],
                       "resumed_first_step": resumed["result"]["first_step_unix"] - resumed["launched"]}
                assert resumed["result"]["weights_sha256"] == every["result"]["weights_sha256"], "resume not exact"
                rows[model].append(row)
                print(f"{model:10} {rep:>3} {row['bytes']:>10} {row['save']:7.3f} {row['overhead']:8.2%} "
                      f"{row['wall_ratio']:14.3f} {row['signal_to_disk']:14.3f} "
                      f"{row['fresh_first_step']:13.2f} / {row['resumed_first_step']:.2f}", flush=True)
    print()
    for model, values in rows.items():
        med = {key: statistics.median(v[key] for v in values) for key in values[0]}
        print(f"median {model}: checkpoint {med['bytes']:.0f} bytes saved in {med['save']:.3f} s; overhead of one "
              f"checkpoint per epoch {med['overhead']:.2%} of epoch time (wall every/end {med['wall_ratio']:.3f}); "
              f"signal to checkpoint on disk {med['signal_to_disk']:.3f} s; launch to first step "
              f"{med['fresh_first_step']:.2f} s fresh, {med['resumed_first_step']:.2f} s resumed")


if __name__ == "__main__":
    main()
