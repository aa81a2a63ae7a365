"""Benchmark: training time per epoch in udocker, with either proot, against the native runtime, side by side in one run.

Run as the ordinary user in a pipeline working directory after the demo (the image pulled, the digits prepared):

    PYTHONPATH=src python benchmarks/runtimes.py --reps 3 --epochs 6

Three runs train the same experiment with the same Gloo launcher: udocker with the image's seccomp-accelerated proot
(``image-proot``), udocker with the host's Debian proot (``host-proot``), and the native venv; interleaved rep by rep
so machine noise hits all alike. Prints every run, then medians and each udocker/native ratio. Figures, not
assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from hvdflow.config.experiment import TrainSpec
from hvdflow.config.profile import load_profile
from hvdflow.images.catalog import PROOT_ENGINES
from hvdflow.pipeline.resume import identity_of
from hvdflow.pipeline.stages import train
from hvdflow.runtime import runtime_for


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--image-record", type=Path, default=Path("resources/images/hvdflow-cpu.json"))
    parser.add_argument("--dataset", type=Path, default=Path("resources/datasets/digits"))
    parser.add_argument("--catalog", type=Path, default=Path("containers/catalog.yaml"))
    parser.add_argument("--profiles", nargs=2, type=Path, metavar=("UDOCKER", "NATIVE"),
                        default=[Path("profiles/local/hvdflow.yaml"), Path("profiles/local-native/hvdflow.yaml")])
    args = parser.parse_args()
    spec = TrainSpec(ranks=args.ranks, model="mlp", hidden_units=64, epochs=args.epochs, batch_size=32,
                     learning_rate=0.01, momentum=0.9, warmup_epochs=1, seed=1234)
    udocker, native = (load_profile(p) for p in args.profiles)
    runtimes = {f"{engine}-proot": runtime_for(replace(udocker.runtime, options=replace(udocker.runtime.options, proot=engine)),
                                               args.image_record, args.catalog)
                for engine in PROOT_ENGINES}
    runtimes["native"] = runtime_for(native.runtime, args.image_record, args.catalog)
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runtimes}
    print(f"{'runtime':11} {'rep':>3} {'wall s':>8} {'epoch 1 s':>10} {'median epoch 2+ s':>18}  weights")
    with tempfile.TemporaryDirectory(prefix="hvdflow-bench-") as tmp:
        for rep in range(args.reps):
            for name, runtime in runtimes.items():
                out = Path(tmp) / f"{name}-{rep}"
                start = time.perf_counter()
                identity = identity_of(asdict(spec), "benchmark", args.dataset.resolve() / "index.json")
                results = train(runtime, "gloo", spec, args.dataset.resolve(), out, out / "logs", identity)
                wall = time.perf_counter() - start
                epochs = [float(s) for s in results[0].epoch_seconds]
                later = statistics.median(epochs[1:]) if len(epochs) > 1 else float("nan")
                rows[name].append((wall, epochs[0], later))
                print(f"{name:11} {rep:>3} {wall:8.2f} {epochs[0]:10.2f} {later:18.3f}  {results[0].weights_sha256[:12]}",
                      flush=True)
    print()
    medians = {name: [statistics.median(v[i] for v in values) for i in range(3)] for name, values in rows.items()}
    for name, (wall, first, later) in medians.items():
        print(f"median {name:11} wall {wall:7.2f} s, epoch 1 {first:6.2f} s, epochs 2+ {later:6.3f} s")
    n = medians["native"]
    for engine in PROOT_ENGINES:
        u = medians[f"{engine}-proot"]
        print(f"udocker ({engine} proot)/native: wall {u[0] / n[0]:.2f}x, epoch 1 {u[1] / n[1]:.2f}x, "
              f"epochs 2+ {u[2] / n[2]:.2f}x")


if __name__ == "__main__":
    main()
