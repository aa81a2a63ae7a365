"""Benchmark: allreduce against neighbour averaging, on IID and on label-sorted (non-IID) shards, side by side.

Run as the ordinary user in a pipeline working directory after the demo (the image pulled, the digits prepared):

    PYTHONPATH=src python benchmarks/neighbour.py --profile profiles/local
    PYTHONPATH=src python benchmarks/neighbour.py --profile profiles/testbed --nodes 2

Four experiments train the digits MLP with the same ranks, epochs and seed through the profile (Slurm jobs on a
Slurm profile): strategy allreduce or neighbour (``--topology``), shard_order shuffled or by_label. Snakemake runs
them (with their evaluation) one after another, ``--repetitions`` times (the later ones with ``--forcerun train``),
so that machine noise hits all four alike. Prints, per experiment: the time per step (median over the epochs after
the first, then median and range over the repetitions), the bytes a rank sent per step, the final consensus
distance and the test accuracy (the same in every repetition: training is deterministic); writes the
table and a figure (consensus distance and validation accuracy per epoch) to ``results/neighbour-comparison/``; and
what the alpha-beta cost model predicts per step for more ranks on real networks (the byte counts are the
trainer's own formulas, :mod:`hvdflow_trainer.neighbours`). Figures, not assertions: the
machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402

from hvdflow.pipeline.plots import read_history, save  # noqa: E402
from hvdflow_trainer.neighbours import allreduce_bytes_per_step, neighbour_bytes_per_step  # noqa: E402
from hvdflow_wire.metrics import TrainingMetrics  # noqa: E402

OUT = Path("results/neighbour-comparison")
MODEL_BYTES = {"mlp": 4810 * 4, "resnet50": 23_600_000 * 4}
"""Trainable float32 bytes of the digits MLP (64 hidden units) and of ResNet-50 on BigEarthNet's 19 labels."""
NETWORKS = (("10 GbE (alpha 30 us, 1.25 GB/s)", 30e-6, 1.25e9), ("InfiniBand HDR (alpha 2 us, 25 GB/s)", 2e-6, 25e9))
"""Networks the cost model is evaluated for: per-message latency (s) and per-link bandwidth (bytes/s)."""


def experiments(args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """The four experiments, by name."""
    base = {"dataset": "digits", "image": "hvdflow-cpu", "ranks": args.ranks, "nodes": args.nodes, "model": "mlp",
            "epochs": args.epochs, "batch_size": 32, "learning_rate": 0.01, "seed": 1234}
    runs: dict[str, dict[str, object]] = {}
    for order in ("shuffled", "by_label"):
        runs[f"cmp-allreduce-{order}"] = {**base, "shard_order": order}
        runs[f"cmp-neighbour-{order}"] = {**base, "shard_order": order, "strategy": "neighbour",
                                          "topology": args.topology}
    return runs


def step_seconds(model_bytes: int, ranks: int, strategy: str, latency: float, bandwidth: float) -> float:
    """Communication seconds per step in the alpha-beta model: a ring allreduce takes 2(n-1) rounds; a neighbour
    exchange (``strategy`` is its topology) one round, its messages to the out-neighbours at once over one link."""
    if strategy == "allreduce":
        return 2 * (ranks - 1) * latency + allreduce_bytes_per_step(ranks, model_bytes) / bandwidth
    return latency + neighbour_bytes_per_step(strategy, ranks, model_bytes) / bandwidth


def row(name: str, spec: dict[str, object]) -> dict[str, object]:
    """One experiment's figures from its results."""
    folder = Path("results") / name
    metrics = TrainingMetrics.read(str(folder / "metrics.json"))
    history = read_history(folder / "history.csv")
    evaluation = json.loads((folder / "evaluation.json").read_text())
    later = metrics.epoch_seconds[1:] or metrics.epoch_seconds
    return {"experiment": name, "strategy": spec.get("strategy", "allreduce"), "shard_order": spec["shard_order"],
            "ranks": spec["ranks"], "nodes": spec["nodes"],
            "ms_per_step": round(1000 * statistics.median(later) / metrics.steps_per_epoch, 2),
            "bytes_per_step": int(history["sent_bytes_per_step"][-1]),
            "consensus_distance": history["consensus_distance"][-1],
            "test_accuracy": evaluation["accuracy"]}


def summary(repetitions: list[dict[str, object]]) -> dict[str, object]:
    """One experiment's row over its repetitions: time per step as median and range; the rest must not change."""
    times = [float(r["ms_per_step"]) for r in repetitions]  # type: ignore[arg-type]
    first = dict(repetitions[0])
    for key in ("bytes_per_step", "consensus_distance", "test_accuracy"):
        if any(r[key] != first[key] for r in repetitions):
            print(f"warning: {first['experiment']}: {key} differs between repetitions", file=sys.stderr)
    first.update(ms_per_step=round(statistics.median(times), 2), ms_per_step_min=min(times),
                 ms_per_step_max=max(times), repetitions=len(times))
    return first


def figure(names: list[str], out: Path) -> None:
    """Consensus distance and validation accuracy per epoch of every experiment."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name in names:
        history = read_history(Path("results") / name / "history.csv")
        epochs = [int(e) + 1 for e in history["epoch"]]
        label = name.removeprefix("cmp-")
        left.plot(epochs, history["consensus_distance"], marker="o", label=label)
        right.plot(epochs, history["val_accuracy"], marker="o", label=label)
    left.set_ylabel("consensus distance (L2 from the ranks' mean)")
    right.set_ylabel("validation accuracy")
    for ax in (left, right):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("allreduce against neighbour averaging, IID and label-sorted shards")
    save(fig, out)


def main() -> None:
    """Train the four experiments, then print and write the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="profiles/local")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--topology", default="ring", choices=("ring", "exp2", "onepeer-exp2"))
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    runs = experiments(args)
    OUT.mkdir(parents=True, exist_ok=True)
    config = OUT / "config.yaml"
    config.write_text(yaml.safe_dump({"experiments": runs}))
    targets = [f"results/{name}/evaluation.json" for name in runs]
    measured: dict[str, list[dict[str, object]]] = {name: [] for name in runs}
    for repetition in range(args.repetitions):
        again = ["--forcerun", "train"] if repetition else []
        subprocess.run(["snakemake", "--profile", args.profile, *targets, *again, "--configfile", str(config)],
                       check=True)
        for name, spec in runs.items():
            measured[name].append(row(name, spec))
    rows = [summary(measured[name]) for name in runs]
    with open(OUT / "table.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    figure(list(runs), OUT / "comparison.png")
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), delimiter="\t")
    writer.writeheader()
    writer.writerows(rows)
    print(f"\nwritten: {OUT / 'table.csv'}, {OUT / 'comparison.png'}")
    print("\nalpha-beta model, communication per step and rank (ms):")
    schemes = ("allreduce", "ring", "onepeer-exp2")
    for network, latency, bandwidth in NETWORKS:
        for model, d in MODEL_BYTES.items():
            for n in (4, 64):
                times = ", ".join(f"{scheme} {1000 * step_seconds(d, n, scheme, latency, bandwidth):.3f}"
                                  for scheme in schemes)
                print(f"  {network}, {model}, {n} ranks: {times}")

if __name__ == "__main__":
    main()
