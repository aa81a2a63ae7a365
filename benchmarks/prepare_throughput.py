"""Benchmark: dataset preparation throughput with 1 and 2 parallel chunk jobs, and the training input pipeline's
read rate against the training step rate. Figures, not assertions: the machines are shared and noisy.

Run as the ordinary user in a pipeline working directory where the image is pulled (``resources/images/``):

    PYTHONPATH=src python benchmarks/prepare_throughput.py --patches 400 --reps 2

1. Writes a BigEarthNet v1 folder of ``--patches`` patches (12 real GeoTIFF bands at their native sizes and label
   JSON, the writers the tests use) and lists it into 2 chunks.
2. Prepares both chunks one job at a time, then both at once (each job is its own ``udocker run``, as Snakemake
   starts them), each way free to use both CPUs and pinned (job i and its udocker, proot and Python on CPU i),
   ``--reps`` times interleaved. Prints patches/s and MB/s of input files, by wall time, and the in-container time
   of the chunk jobs (which includes importing TensorFlow). Pinned runs show what proot's system-call tracing costs
   when the tracer and the traced process land on different CPUs.
3. Measures the records/s one rank's training input pipeline delivers (shards read, decoded, normalised, batched;
   no model), for 1 rank and for rank 0 of 2, and trains the small CNN with 2 ranks to get the step rate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dataset_files import BANDS, write_ben_v1  # noqa: E402
from demo_tree import add_tree_options, tree_profile, tree_runtime  # noqa: E402
from hvdflow.config.experiment import TrainSpec  # noqa: E402
from hvdflow.launch.supervise import run_one  # noqa: E402
from hvdflow.pipeline.stages import gather_dataset, list_dataset, prepare_chunk, train  # noqa: E402


def prepare_chunks(runtime, manifest: Path, out: Path, jobs: int, pinned: bool, log: Path) -> tuple[float, list[dict]]:  # type: ignore[no-untyped-def,type-arg]
    """Prepare chunks 0 and 1 with ``jobs`` at a time (with ``pinned``, job i and its udocker, proot and Python on
    CPU i mod 2); the wall time and the chunks' reports."""
    for i in range(2):
        shutil.rmtree(out / f"chunk-{i}", ignore_errors=True)

    def one(i: int) -> None:
        if pinned:   # the calling thread's affinity, inherited by the processes it starts
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[i % jobs]})
        prepare_chunk(runtime, manifest, i, out / f"chunk-{i}", log.with_suffix(f".{i}.log"))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, range(2)))
    wall = time.perf_counter() - start
    return wall, [json.loads((out / f"chunk-{i}" / "report.json").read_text()) for i in range(2)]


def input_rate(runtime, dataset: Path, rank: int, size: int, log: Path, timeout: "float | None") -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The input pipeline's rate for one rank, measured in the runtime (killed after the profile's ``timeout``)."""
    command = ["python3", "-m", "hvdflow_trainer.input_rate", "--dataset", str(dataset), "--rank", str(rank),
               "--size", str(size), "--passes", "3"]
    log.unlink(missing_ok=True)
    run_one(runtime, command, [dataset], log, timeout, "measuring the input rate")
    return json.loads(log.read_text().strip().splitlines()[-1])


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--patches", type=int, default=400)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the step-rate training run")
    add_tree_options(parser)
    args = parser.parse_args()
    profile = tree_profile(args)
    runtime = tree_runtime(args)
    with tempfile.TemporaryDirectory(prefix="hvdflow-bench-", dir=Path.cwd()) as tmp:
        base = Path(tmp)
        raw = write_ben_v1(base / "raw", args.patches)
        spec = {"name": "bench", "source": "bigearthnet-v1", "path": str(raw.root), "nomenclature": 19,
                "bands": list(BANDS), "seasonal_snow_list": str(raw.snow_list),
                "cloud_shadow_list": str(raw.cloud_list), "validation_fraction": 0.1, "test_fraction": 0.1,
                "seed": 1, "chunks": 2, "shard_size_mb": 20, "skip_bad_samples": False}
        out = base / "dataset"
        list_dataset(runtime, spec, 2, out / "manifest", base / "list.log")
        modes = [(1, False), (1, True), (2, False), (2, True)]
        print(f"{'mode':18} {'rep':>3} {'wall s':>7} {'patches/s':>10} {'MB/s':>7} {'in-container s':>15}")
        rows: dict[str, list[tuple[float, float, float]]] = {}
        for rep in range(args.reps):
            for jobs, pinned in modes:
                name = f"{jobs} job{'s' if jobs > 1 else ''}{', pinned' if pinned else ''}"
                wall, reports = prepare_chunks(runtime, out / "manifest", out, jobs, pinned, base / "chunk.log")
                patches = sum(int(r["samples"]) for r in reports)
                megabytes = sum(int(r["input_bytes"]) for r in reports) / 1e6
                inside = [float(r["seconds"]) for r in reports]
                rows.setdefault(name, []).append((wall, patches / wall, megabytes / wall))
                print(f"{name:18} {rep:>3} {wall:7.2f} {patches / wall:10.1f} {megabytes / wall:7.2f} "
                      f"{' + '.join(f'{s:.1f}' for s in inside):>15}", flush=True)
        index = gather_dataset(out / "manifest", [out / "chunk-0", out / "chunk-1"], out)
        medians = {name: [statistics.median(r[i] for r in values) for i in range(3)] for name, values in rows.items()}
        print()
        for name, (wall, pps, mbs) in medians.items():
            print(f"median, {name:18}: {wall:6.2f} s, {pps:6.1f} patches/s, {mbs:6.2f} MB/s")
        print(f"2 jobs / 1 job: {medians['2 jobs'][1] / medians['1 job'][1]:.2f}x patches/s; pinned: "
              f"{medians['2 jobs, pinned'][1] / medians['1 job, pinned'][1]:.2f}x")
        shard_mb = sum(int(s["bytes"]) for split in index["splits"].values() for s in split["shards"]) / 1e6
        print(f"{patches} patches, {megabytes:.1f} MB of GeoTIFF and JSON in, {shard_mb:.1f} MB of shards out")
        print()
        single = input_rate(runtime, out, 0, 1, base / "rate-1.log", profile.step_timeout)
        half = input_rate(runtime, out, 0, 2, base / "rate-2.log", profile.step_timeout)
        for label, rate in (("1 rank", single), ("rank 0 of 2", half)):
            print(f"input pipeline, {label} ({rate['sharding']}): {rate['records_per_s']:.0f} records/s, "
                  f"{rate['mb_per_s']:.1f} MB/s of shards")
        spec_train = TrainSpec(ranks=2, model="small-cnn", hidden_units=32, epochs=args.epochs, batch_size=32,
                               learning_rate=0.01, momentum=0.9, warmup_epochs=1, seed=1)
        results = train(runtime, profile.launcher, spec_train, out, base / "train", base / "train-logs")
        per_rank = results[0].train_records_per_rank
        epoch = statistics.median(float(s) for s in results[0].epoch_seconds[1:])
        steps = -(-per_rank // 32)
        print(f"training, small CNN, 2 ranks, batch 32: {steps / epoch:.2f} steps/s, {per_rank / epoch:.1f} "
              f"records/s per rank (epochs 2+, median {epoch:.2f} s incl. validation)")
        print(f"input / training rate, rank 0 of 2: {half['records_per_s'] / (per_rank / epoch):.1f}x")


if __name__ == "__main__":
    main()
