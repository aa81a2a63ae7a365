"""Benchmark: what udocker's proot engine costs a GPU training process, against the same process run natively.

For a machine with one NVIDIA GPU and a Python that has PyTorch with CUDA (no image, no Slurm, no network):

    python3 benchmarks/gpu_engine.py --proot PATH/TO/proot [--out FILE.json]

Each measurement runs three ways, interleaved rep by rep so machine noise hits all alike: ``native``; under proot
with its seccomp filter (``proot-seccomp``: the image's proot, udocker's P1) and with every system call stopped
(``proot-ptrace``: ``PROOT_NO_SECCOMP=1``, what udocker's P2 and Debian's proot do). proot runs with the host's own
root (``-r /``), so the processes are the same and only the engine differs: this isolates the ptrace cost that sits
between Python and the device; it is not a container image's software. Measured, per way:

- ``start``: seconds from exec to ``import torch`` done and the first CUDA tensor on the device;
- ``synthetic``: ResNet-50 training steps (batch 128, 224x224, bf16 autocast, SGD) on one GPU, images per second;
- ``files``: the same steps fed from a folder of small files (one ``.npy`` per image, as image-folder datasets are)
  by a DataLoader with worker processes: every file's open and read passes through proot.

Prints a table of medians with each proot/native ratio, and writes every run to ``--out``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WAYS = ("native", "proot-seccomp", "proot-ptrace")
BATCH = 128


def child(kind: str, steps: int, files: str, workers: int) -> dict[str, Any]:
    """One measurement in this (child) process: ``start`` (import and CUDA init), or training steps per second."""
    started = float(os.environ["HVDFLOW_BENCH_EXEC"])
    import torch
    import torchvision

    torch.ones(1, device="cuda")
    result: dict[str, Any] = {"start_s": time.time() - started, "gpus_seen": torch.cuda.device_count(),
                              "device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    if kind == "start":
        return result
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(images.to(memory_format=torch.channels_last)), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    if kind == "synthetic":
        images = torch.randn(BATCH, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (BATCH,), device="cuda")
        batches = ((images, labels) for _ in range(steps + 5))
    else:
        batches = ((x.cuda(non_blocking=True), y.cuda(non_blocking=True)) for x, y in _loader(files, workers))
    for _ in range(5):  # warm-up: cuDNN's choice of kernels, the loader's workers
        step(*next(batches))
    torch.cuda.synchronize()
    begun = time.perf_counter()
    done = 0
    for images, labels in batches:
        step(images, labels)
        done += 1
        if done == steps:
            break
    torch.cuda.synchronize()
    result["images_per_s"] = done * BATCH / (time.perf_counter() - begun)
    return result


def _loader(folder: str, workers: int) -> Any:
    """A DataLoader over the ``.npy`` files of ``folder``, one image each, read by ``workers`` processes, endless."""
    import numpy as np
    import torch

    class Files(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self) -> None:
            self.paths = sorted(Path(folder).glob("*.npy"))

        def __len__(self) -> int:
            return len(self.paths)

        def __getitem__(self, i: int) -> Any:
            image = np.load(self.paths[i]).astype(np.float32) / 255.0
            return torch.from_numpy(image), i % 1000

    loader = torch.utils.data.DataLoader(Files(), batch_size=BATCH, shuffle=True, num_workers=workers,
                                         pin_memory=True, drop_last=True, persistent_workers=True)
    while True:
        yield from loader


def write_files(folder: Path, count: int) -> None:
    """``count`` random 3x224x224 uint8 images, one ``.npy`` file each (147 KiB)."""
    import numpy as np

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        np.save(folder / f"{i:06d}.npy", rng.integers(0, 256, (3, 224, 224), dtype=np.uint8))


def run_way(way: str, proot: Path, kind: str, args: argparse.Namespace, files: Path) -> dict[str, Any]:
    """One child run of ``kind`` the way ``way`` says; its result with the way's name."""
    argv = [sys.executable, __file__, "--child", kind, "--steps", str(args.steps), "--files", str(files),
            "--workers", str(args.workers)]
    env = dict(os.environ)
    if way != "native":
        argv = [str(proot), "-r", "/", "-w", os.getcwd(), *argv]
        env.pop("PROOT_NO_SECCOMP", None)
        if way == "proot-ptrace":
            env["PROOT_NO_SECCOMP"] = "1"
    env["HVDFLOW_BENCH_EXEC"] = repr(time.time())
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{way} {kind} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"way": way, "kind": kind, **json.loads(proc.stdout.strip().splitlines()[-1])}


def table(runs: list[dict[str, Any]]) -> str:
    """Medians per way and measurement, with each proot/native ratio (time ratios for start, rate ratios else)."""
    lines = [f"{'measurement':<22}" + "".join(f"{w:>16}" for w in WAYS) + "".join(f"{w + '/native':>24}" for w in WAYS[1:])]
    for kind, key in (("start", "start_s"), ("synthetic", "images_per_s"), ("files", "images_per_s")):
        medians = {w: statistics.median(r[key] for r in runs if r["way"] == w and r["kind"] == kind) for w in WAYS}
        label = f"{kind} ({'s' if key == 'start_s' else 'img/s'})"
        lines.append(f"{label:<22}" + "".join(f"{medians[w]:>16.2f}" for w in WAYS)
                     + "".join(f"{medians[w] / medians['native']:>24.3f}" for w in WAYS[1:]))
    return "\n".join(lines)


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--proot", type=Path, help="the proot binary (the image's static one)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per run")
    parser.add_argument("--images", type=int, default=4096, help="files in the file-fed run's folder")
    parser.add_argument("--workers", type=int, default=8, help="the DataLoader's worker processes")
    parser.add_argument("--out", type=Path, help="JSON file for every run")
    parser.add_argument("--child", choices=("start", "synthetic", "files"), help=argparse.SUPPRESS)
    parser.add_argument("--files", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.files, args.workers)))
        return
    if args.proot is None:
        parser.error("--proot is required")
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "images"
        write_files(files, args.images)
        runs = []
        for rep in range(args.reps):
            for kind in ("start", "synthetic", "files"):
                for way in WAYS:
                    runs.append({"rep": rep, **run_way(way, args.proot.resolve(), kind, args, files)})
                    print(json.dumps(runs[-1]), flush=True)
    print(table(runs))
    if args.out:
        args.out.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
