"""Benchmark: where a rank's start goes, under udocker's P1 and R1 and natively, side by side in one run.

Run as the ordinary user in a pipeline working directory after the demo (``bash scripts/demo.sh``: the image pulled
with ``execmode: auto``, so both containers exist), naming this script in the checkout (the demo's tree has no
``benchmarks/``):

    cd ~/hvdflow-demo && PYTHONPATH=src python CHECKOUT/benchmarks/rank_start.py --reps 5
    # add --native profiles/local-native/hvdflow.yaml where that profile's venv is built

Each row is one layer of what a launcher starts for a rank, timed from outside (wall clock, median over the reps,
interleaved rep by rep so machine noise hits all alike):

- ``udocker CLI``: udocker's own start (``udocker version``: the interpreter and udocker's modules);
- ``udocker run true``: that plus one ``udocker run`` of ``/bin/true`` in the mode's container (the engine's set-up:
  proot, or runc's bundle and namespaces);
- ``hvdflow's run true``: the runtime's whole command for ``true``: hvdflow's layers added (the mode chooser under
  R1/auto, ``last_exit`` in the container);
- ``import TF + Horovod``: the same command running ``import tensorflow, horovod.tensorflow``: what a rank pays before
  its first line of training.

Then hvdflow's own share (``hvdflow's run true`` - ``udocker run true``) and each mode's import against native.
Figures, not assertions: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

from demo_tree import add_tree_options, tree_runtime
from hvdflow.runtime import Runtime
from hvdflow.runtime.udocker.client import run_argv
from hvdflow.runtime.udocker.runtime import UdockerRuntime

IMPORT = "import tensorflow, horovod.tensorflow"


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Seconds one run of ``argv`` takes; RuntimeError with its output if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:6])}... exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds


def udocker_layers(runtime: UdockerRuntime, mode: str) -> dict[str, Callable[[], float]]:
    """The layers of ``runtime`` (one mode's container) as timed runs."""
    env = runtime.process_env()
    return {
        "udocker CLI": lambda: timed(runtime.udocker.argv("version"), env),
        "udocker run true": lambda: timed(run_argv(runtime.udocker, runtime.container, ["/bin/true"],
                                                   as_user=mode != "R1"), env),
        "hvdflow's run true": lambda: timed(runtime.command(["true"], {}, []), env),
        "import TF + Horovod": lambda: timed(runtime.command(["python3", "-c", IMPORT], {}, []), env),
    }


def native_layers(runtime: Runtime) -> dict[str, Callable[[], float]]:
    """The native venv's layers: its command for ``true`` and for the import."""
    env = runtime.process_env()
    return {"hvdflow's run true": lambda: timed(runtime.command(["true"], {}, []), env),
            "import TF + Horovod": lambda: timed(runtime.command(["python3", "-c", IMPORT], {}, []), env)}


def main() -> None:
    """Time every layer of every mode, rep by rep, and print the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    add_tree_options(parser)
    parser.add_argument("--native", type=Path, default=None, metavar="PROFILE",
                        help="also the native venv of this profile (profiles/local-native/hvdflow.yaml)")
    args = parser.parse_args()
    modes: dict[str, dict[str, Callable[[], float]]] = {}
    for mode in ("P1", "R1"):
        runtime = tree_runtime(args, mode)
        assert isinstance(runtime, UdockerRuntime)
        modes[mode] = udocker_layers(runtime, mode)
    if args.native is not None:
        modes["native"] = native_layers(tree_runtime(args, profile=args.native))
    samples: dict[tuple[str, str], list[float]] = {}
    for rep in range(args.reps + 1):  # rep 0 warms the page cache and the containers; not counted
        for mode, layers in modes.items():
            for layer, run in layers.items():
                seconds = run()
                if rep:
                    samples.setdefault((mode, layer), []).append(seconds)
    median = {key: statistics.median(values) for key, values in samples.items()}
    layers = list(dict.fromkeys(layer for _, layer in samples))
    print(f"median seconds over {args.reps} reps (after one warm-up)")
    print(f"{'layer':22}" + "".join(f"{mode:>10}" for mode in modes))
    for layer in layers:
        print(f"{layer:22}" + "".join(f"{median[(m, layer)]:>10.3f}" if (m, layer) in median else f"{'-':>10}"
                                      for m in modes))
    for mode in ("P1", "R1"):
        own = median[(mode, "hvdflow's run true")] - median[(mode, "udocker run true")]
        print(f"{mode}: hvdflow's own layers (chooser, last_exit) {own:.3f} s; udocker's run of true "
              f"{median[(mode, 'udocker run true')]:.3f} s, of which udocker's CLI {median[(mode, 'udocker CLI')]:.3f} s")
        if "native" in modes:
            ratio = median[(mode, "import TF + Horovod")] / median[("native", "import TF + Horovod")]
            print(f"{mode}: rank start + TF/Horovod import, {mode}/native: {ratio:.3f}")


if __name__ == "__main__":
    main()
