"""The GPU proof: hvdflow's PyTorch path on a machine with NVIDIA GPUs, natively and in udocker (P1 and R1).

For a GPU node without Slurm whose Python has PyTorch built for CUDA, NumPy, PyYAML, psutil and scikit-learn, with a
*kit* beside it (``scripts/gpu-kit.sh`` makes one; ``scripts/gpu-check.sh`` runs this as an ordinary user):

    python3 benchmarks/gpu_check.py --kit KIT --work DIR [--epochs 5] [--steps 40] [--out FILE.json]

The kit holds what the node may lack: udocker 1.3.17 and Horovod 0.28.1's Python sources (its rendezvous server,
which hvdflow's launcher starts) under ``KIT/site``, the static proot of hvdflow's images (``KIT/proot``) and runc
(``KIT/runc``). ``KIT/horovod``, where ``scripts/gpu-horovod.sh`` built Horovod with NCCL for the node's torch, comes
first on every way's path. The container is made here with ``udocker import``: a root holding hvdflow's proot, this
node's loader cache and name-service files, and mount points, run with the node's ``/usr`` and the Python's prefix bound.
So the software is the node's own, the same as natively: what differs between the ways is only the engine (proot
under P1, rootless runc under R1), which is what a GPU rank pays for the container. (hvdflow's GPU images cannot
travel to the machines this project is lent: see docs/measurements.md.)

Each way (``native``, ``udocker-P1``, ``udocker-R1``) is checked and measured:

1. ``gpus``: one process per GPU with ``CUDA_VISIBLE_DEVICES`` set to that GPU, as Slurm's ``--gres`` sets it, sees
   exactly one device, and each sees its own (the UUIDs differ).
2. ``digits``: hvdflow's trainer (``framework: pytorch``, ``distributed`` as ``--distributed`` says: ``ddp``, PyTorch's
   DistributedDataParallel over NCCL, or ``horovod``, Horovod's DistributedOptimizer, whose GPU collectives must be
   NCCL's: the NCCL activities of Horovod's timeline of the run are counted, and none is a failure), started by
   hvdflow's own launcher with one rank per GPU, trains the demo's MLP on the demo's digits; the weights must equal
   native's. (With one GPU, Horovod's DistributedOptimizer reduces no gradient: it registers its allreduce hooks only
   where there are 2 ranks or more; the parameters' broadcast is then the NCCL collective the run makes.) How the
   ranks used their GPUs (utilization and memory, sampled by each rank) and where their steps went is printed per
   way as ``hvdflow report`` prints a run's (:func:`allocation`).
3. ``resnet50``: ResNet-50 training steps on synthetic batches (``benchmarks/gpu_engine.py``), images per second.
4. ``signal``: the scheduler's warning (SIGUSR1) reaches the launcher mid-run while NCCL's communicators are up; the
   ranks must stop together with hvdflow's stop status (75), leave a checkpoint, and leave no process behind.

Prints a table with each way's figures and its ratio to native, and writes every result to ``--out``. A failed
check is named and the script exits 1 after the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT / "src"))

from hvdflow.config.experiment import TrainSpec  # noqa: E402
from hvdflow.errors import RunStopped  # noqa: E402
from hvdflow.images.udocker_tools import IMAGE_PROOT  # noqa: E402
from hvdflow.pipeline.resume import identity_of  # noqa: E402
from hvdflow.pipeline.run_report import report_text  # noqa: E402
from hvdflow.pipeline.smoke import DIGITS  # noqa: E402
from hvdflow.pipeline.stages import prepare_dataset, train  # noqa: E402
from hvdflow.runtime.native.runtime import NativeRuntime  # noqa: E402
from hvdflow.runtime.packages import CONTAINER_PACKAGES, TRAINER_MOUNT, package_dir  # noqa: E402
from hvdflow.runtime.udocker.client import Udocker  # noqa: E402
from hvdflow.runtime.udocker.runtime import UdockerRuntime, expose_gpus  # noqa: E402
from hvdflow_runstate import STOPPED_EXIT  # noqa: E402

WAYS = ("native", "udocker-P1", "udocker-R1")
IMAGE = "hvdflow-gpu-check:host"
ENGINE = CHECKOUT / "benchmarks" / "gpu_engine.py"
NO_IMAGE = "sha256:" + "0" * 64
"""The image digest in the runs' identity (which keeps a checkpoint from resuming another run): the node's own
software runs every way, no image."""
ROOT_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf", "hosts", "localtime")
"""The node's files under /etc that the container's root gets a copy of: the loader's cache (where libcuda is
found), the name service's configuration (Gloo resolves this host)."""


@dataclass(frozen=True)
class NodeSoftware:
    """A runtime whose every command also binds the node's software (``/usr``, the Python's prefix: none natively)
    and finds the kit's Python packages (Horovod's rendezvous server) after hvdflow's own."""

    inner: Any
    pythonpath: str
    binds: tuple[Path, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    """Variables every command gets (Horovod's timeline)."""

    def command(self, argv: Sequence[str], env: Any, paths: Sequence[Path], hostenv: bool = False) -> list[str]:
        """The inner runtime's command with the node's software bound and the kit's packages on the path."""
        return self.inner.command(argv, {**env, **dict(self.env), "PYTHONPATH": self.pythonpath},
                                  [*self.binds, *paths], hostenv)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def for_launcher(self, launcher: str) -> "NodeSoftware":
        """Fitted to ``launcher`` as the inner runtime is."""
        return replace(self, inner=self.inner.for_launcher(launcher))


def root_tarball(path: Path, proot: Path) -> Path:
    """The container's root as a tarball: mount points, ``/bin``-style links into ``/usr``, the node's loader and
    name-service files, and hvdflow's proot where its images carry it. ``usr/lib/x86_64-linux-gnu`` is where
    ``udocker setup --nvidia`` copies the driver's libraries (it sets nothing up without it); the node's ``/usr``
    bound over it brings the same libraries."""
    def add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        tar.addfile(info)

    with tarfile.open(path, "w") as tar:
        for name in ("usr", "usr/lib", "usr/lib/x86_64-linux-gnu", "opt", "opt/hvdflow", "opt/hvdflow/bin", "etc",
                     "proc", "sys", "dev", "home", "root", "run", "var", "var/tmp", "mnt"):
            add_dir(tar, name)
        add_dir(tar, "tmp", 0o1777)
        for link in ("bin", "lib", "lib64", "sbin"):
            if Path("/" + link).is_symlink():
                info = tarfile.TarInfo(link)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink("/" + link)
                tar.addfile(info)
        for name in ROOT_ETC:
            if Path("/etc", name).exists():
                tar.add(str(Path("/etc", name)), arcname=f"etc/{name}")
        tar.add(str(proot), arcname=IMAGE_PROOT)
    return path


def kit_paths(kit: Path) -> list[str]:
    """The kit's Python packages in the order ranks find them: a Horovod built here first, then the kit's own."""
    return [str(p) for p in (kit / "horovod", kit / "site") if p.is_dir()]


def udocker_runtimes(kit: Path, work: Path, env: tuple[tuple[str, str], ...]) -> dict[str, NodeSoftware]:
    """P1's and R1's containers of the node's software (:func:`root_tarball`), made once in ``work``; every command
    gets ``env``."""
    wrapper = work / "bin" / "udocker"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f"#!{sys.executable}\nfrom udocker.maincmd import main\nmain()\n")
    wrapper.chmod(0o755)
    os.environ["PATH"] = f"{wrapper.parent}:{os.environ['PATH']}"  # this udocker, for udocker setup --nvidia
    os.environ["UDOCKER_USE_RUNC_EXECUTABLE"] = str(kit / "runc")  # the kit's runc, which R1 runs
    udocker = Udocker(work / "udocker", executable=str(wrapper), proot=kit / "proot")
    udocker.prepare()
    if udocker.call("inspect", IMAGE).returncode != 0:
        udocker.check("import", str(root_tarball(work / "root.tar", kit / "proot")), IMAGE, timeout=300)
    image_env = [f"PATH={Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    if os.environ.get("LD_LIBRARY_PATH"):
        image_env.append(f"LD_LIBRARY_PATH={os.environ['LD_LIBRARY_PATH']}")
    binds = tuple(dict.fromkeys(Path(p) for p in ("/usr", sys.prefix, os.path.realpath(sys.prefix), work, kit)))
    runtimes = {}
    for mode in ("P1", "R1"):
        name = f"gpu-check-{mode.lower()}"
        container_json = udocker.udocker_dir / "containers" / name / "container.json"
        if not container_json.exists():
            udocker.check("create", f"--name={name}", IMAGE, timeout=300)
            udocker.check("setup", f"--execmode={mode}", name, timeout=300)
        meta = json.loads(container_json.read_text() or "{}")
        meta.setdefault("config", {})["Env"] = image_env  # the node's Python first on PATH, its loader path
        container_json.write_text(json.dumps(meta))
        runtimes[f"udocker-{mode}"] = NodeSoftware(UdockerRuntime(udocker, name, mode),
                                                   os.pathsep.join([TRAINER_MOUNT, *kit_paths(kit)]), binds, env)
    for runtime in runtimes.values():  # udocker setup --nvidia, as a pipeline's task does on a GPU node
        print(f"# {expose_gpus(runtime.gpu_setup())}", flush=True)
    return runtimes


def run_in(runtime: Any, argv: list[str], env: dict[str, str], paths: Sequence[Path], timeout: float) -> str:
    """Run ``argv`` in ``runtime``; its stdout (RuntimeError with its output if it fails)."""
    proc = subprocess.run(runtime.command(argv, env, list(paths)), env=runtime.process_env(), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout


GPU_PROBE = ("import json, torch; i = torch.cuda.current_device() if torch.cuda.device_count() else None; "
             "print(json.dumps({'seen': torch.cuda.device_count(), 'uuid': None if i is None else "
             "str(torch.cuda.get_device_properties(i).uuid), 'name': None if i is None else torch.cuda.get_device_name(i)}))")


def check_gpus(runtime: Any, gpus: int) -> dict[str, Any]:
    """One process per GPU, each given that GPU alone: each must see one device, all different."""
    seen = [json.loads(run_in(runtime, ["python3", "-c", GPU_PROBE], {"CUDA_VISIBLE_DEVICES": str(i)}, [], 300)
                       .strip().splitlines()[-1]) for i in range(gpus)]
    ok = all(s["seen"] == 1 for s in seen) and len({s["uuid"] for s in seen}) == gpus
    return {"ok": ok, "per_rank": seen}


def train_spec(ranks: int, epochs: int, distributed: str) -> TrainSpec:
    """The demo's MLP on the digits in PyTorch with ``distributed`` (``ddp`` or ``horovod``: NCCL on the GPU)."""
    return TrainSpec(ranks=ranks, model="mlp", hidden_units=64, epochs=epochs, batch_size=32, learning_rate=0.01,
                     momentum=0.9, warmup_epochs=1, seed=1234, framework="pytorch", distributed=distributed)


def train_child(args: argparse.Namespace) -> int:
    """(The child process.) Train as ``args`` say in one way with hvdflow's launcher; 75 where the ranks stopped."""
    env = (("HOROVOD_TIMELINE", args.timeline),) if args.timeline else ()
    runtimes = make_runtimes(args.kit, args.work, [args.way], env)
    spec = train_spec(args.ranks, args.epochs, args.distributed)
    out = Path(args.train_out)
    identity = identity_of(asdict(spec), NO_IMAGE, args.dataset / "index.json")
    try:
        results = train(runtimes[args.way], "gloo", spec, args.dataset, out, out / "logs", identity)
    except RunStopped as exc:
        print(f"stopped: {exc}", flush=True)
        return STOPPED_EXIT
    (out / "check.json").write_text(json.dumps({"weights_sha256": results[0].weights_sha256,
                                                "ranks": [r.to_json() for r in results]}))
    return 0


def make_runtimes(kit: Path, work: Path, ways: Sequence[str], env: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """The runtimes of ``ways``: the node's Python, and udocker's containers of the node's software; every command
    gets ``env``."""
    roots = [str(package_dir(name).parent) for name in CONTAINER_PACKAGES]
    runtimes: dict[str, Any] = {"native": NodeSoftware(NativeRuntime(Path(sys.executable)),
                                                       os.pathsep.join([*dict.fromkeys(roots), *kit_paths(kit)]),
                                                       env=env)}
    if any(way != "native" for way in ways):
        runtimes.update(udocker_runtimes(kit, work, env))
    return runtimes


def start_training(args: argparse.Namespace, way: str, epochs: int, out: Path,
                   timeline: Path | None = None) -> subprocess.Popen[str]:
    """The child that trains in ``way`` (its own process group, as a batch step's launcher is), with Horovod's
    timeline written to ``timeline`` where given."""
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, __file__, "--kit", str(args.kit), "--work", str(args.work), "--dataset", str(args.dataset),
            "--child-train", way, "--distributed", args.distributed,
            "--ranks", str(args.gpus), "--epochs", str(epochs), "--train-out", str(out)]
    if timeline:
        timeline.unlink(missing_ok=True)
        argv += ["--timeline", str(timeline)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finished(child: subprocess.Popen[str], timeout: float) -> str:
    """The child's output once it has ended; on a timeout its whole process group is killed first."""
    try:
        return child.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise


def digits(args: argparse.Namespace, way: str) -> dict[str, Any]:
    """Train the digits in ``way``; seconds, weights, accuracy, each rank's GPU; under Horovod, the NCCL allreduces
    its timeline holds (none is a failure: the gradients were not reduced on the GPU)."""
    out = args.work / "runs" / f"{way}-digits"
    timeline = args.work / "runs" / f"{way}-timeline.json" if args.distributed == "horovod" else None
    begun = time.monotonic()
    child = start_training(args, way, args.epochs, out, timeline)
    output = finished(child, 900)
    if child.returncode != 0:
        raise RuntimeError(f"exit {child.returncode}: {output[-3000:]}")
    result = json.loads((out / "check.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    found = {"seconds": time.monotonic() - begun, "weights_sha256": result["weights_sha256"],
             "val_accuracy": metrics["final"]["val_accuracy"], "distributed": args.distributed,
             "rank_gpus": [r["machine"]["gpus"] for r in result["ranks"]],
             "controller": result["ranks"][0]["controller"], "execmode": [r["execmode"] for r in result["ranks"]],
             **allocation(way, result["ranks"], time.monotonic() - begun)}
    if timeline:
        found["nccl_activities"] = nccl_activities(timeline)
        if "INIT_NCCL" not in found["nccl_activities"] or len(found["nccl_activities"]) < 2:
            raise RuntimeError(f"Horovod's timeline {timeline} shows no NCCL collective: {found}")
    return found


def allocation(way: str, ranks: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """How ``way``'s ranks (their ``rank-<r>.json``) used their GPUs: each rank's mean utilization and peak memory
    (None where its sampling saw no GPU, with why), the busiest figures, and ``hvdflow report``'s text and verdict
    of the run."""
    record = {"experiment": f"digits {way}", "hosts": sorted({r["hostname"] for r in ranks}), "record_version": 3,
              "seconds": round(seconds, 1), "ranks": ranks}
    gpus = [(r.get("usage") or {}).get("gpu") for r in ranks]
    busy = [g["utilization_percent_mean"] for g in gpus if g]
    return {"gpu_use": [g if g else (r.get("usage") or {}).get("gpu_absent", "not sampled") for g, r in zip(gpus, ranks)],
            "gpu_busy_percent": max(busy) if busy else None,
            "gpu_memory_mib": max((g["memory_used_mib_peak"] for g in gpus if g), default=None),
            "report": report_text(record)}


def nccl_activities(timeline: Path) -> dict[str, int]:
    """How often each of Horovod's NCCL activities (``INIT_NCCL``: a communicator made; ``NCCL_BCAST``,
    ``NCCL_ALLREDUCE``, ...: a collective) appears in a run's timeline (HOROVOD_TIMELINE)."""
    text = timeline.read_text(errors="replace") if timeline.exists() else ""
    return dict(sorted(Counter(re.findall(r'"name": "([A-Z_]*NCCL[A-Z_]*)"', text)).items()))


def resnet50(runtime: Any, steps: int) -> dict[str, Any]:
    """ResNet-50 training steps on synthetic batches in ``runtime`` (gpu_engine.py's measurement)."""
    env = {"HVDFLOW_BENCH_EXEC": repr(time.time()), "CUDA_VISIBLE_DEVICES": "0"}
    out = run_in(runtime, ["python3", str(ENGINE), "--child", "synthetic", "--steps", str(steps)], env,
                 [ENGINE.parent], 900)
    return json.loads(out.strip().splitlines()[-1])


def processes_naming(marker: str) -> list[tuple[int, str]]:
    """The pid and command line of each other process whose command line names ``marker`` (a run's own folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found.append((int(proc.name), cmdline))
    return found


def rank_groups(marker: str) -> set[int]:
    """The process groups of the ranks of the run whose folder is ``marker``: each rank starts in a session of its
    own, as a Slurm task's processes are a group of their own."""
    groups = set()
    for pid, cmdline in processes_naming(marker):
        if "hvdflow_trainer.train" in cmdline:
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                continue
    return groups


def warning_signal(args: argparse.Namespace, way: str) -> dict[str, Any]:
    """The scheduler's warning as Slurm's ``--signal=USR1@...`` gives it, to every process of every rank (not to the
    launcher, which runs in the batch step), once rank 0 has trained two epochs: the ranks must stop together
    with hvdflow's stop status (75) after a checkpoint, and leave nothing running."""
    out = args.work / "runs" / f"{way}-signal"
    child = start_training(args, way, 200, out)
    log = out / "logs" / "rank-0.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and child.poll() is None:
        if log.exists() and "epoch 2/" in log.read_text(errors="replace"):
            break
        time.sleep(0.2)
    groups = rank_groups(str(out)) - {child.pid} if child.poll() is None else set()
    for group in groups:
        os.killpg(group, signal.SIGUSR1)
    output = finished(child, 300)
    time.sleep(1)
    left = [f"{pid}: {cmdline[:160]}" for pid, cmdline in processes_naming(str(out))]
    checkpoints = sorted(p.name for p in (out / "checkpoints").rglob("ckpt-*.pt"))
    stopped = [line for line in output.splitlines() if "stop" in line.lower()][-3:]
    ok = bool(groups) and child.returncode == STOPPED_EXIT and bool(checkpoints) and not left
    return {"ok": ok, "exit": child.returncode, "signalled_groups": len(groups), "checkpoints": checkpoints,
            "left_running": left, "stop_lines": stopped, "tail": output[-600:] if not ok else ""}


def measured(name: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``call()``'s result, or its error, timed."""
    begun = time.monotonic()
    try:
        result = call()
    except Exception as exc:  # one failed check must not hide the others' figures
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["wall_s"] = round(time.monotonic() - begun, 1)
    print(f"# {name}: {json.dumps(result)[:800]}", flush=True)
    return result


def table(results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """The table of every way's figures and ratios to native, and the failed checks."""
    failed = []
    native = results.get("native", {})
    lines = [f"{'way':<12}{'gpus/rank':>10}{'digits s':>10}{'val acc':>9}{'weights':>10}{'= native':>9}"
             f"{'GPU busy %':>11}{'GPU MiB':>9}{'resnet50 img/s':>16}{'/native':>9}{'signal':>8}"]
    for way, r in results.items():
        d, rn, s, g = r["digits"], r["resnet50"], r["signal"], r["gpus"]
        same = d.get("weights_sha256") == native.get("digits", {}).get("weights_sha256")
        rate = rn.get("images_per_s")
        ratio = rate / native["resnet50"]["images_per_s"] if rate and native.get("resnet50", {}).get("images_per_s") else None
        lines.append(f"{way:<12}{'ok' if g.get('ok') else 'FAIL':>10}{d.get('seconds', float('nan')):>10.1f}"
                     f"{d.get('val_accuracy', float('nan')):>9.4f}{str(d.get('weights_sha256'))[:8]:>10}"
                     f"{'yes' if same else 'NO':>9}{_figure(d.get('gpu_busy_percent')):>11}"
                     f"{_figure(d.get('gpu_memory_mib')):>9}{rate or float('nan'):>16.1f}"
                     f"{ratio if ratio else float('nan'):>9.3f}{'ok' if s.get('ok') else 'FAIL':>8}")
        failed += [f"{way}: {k}: {v.get('error', v)}" for k, v in r.items() if v.get("ok") is False or "error" in v]
        if not same and "error" not in d:
            failed.append(f"{way}: digits weights {d.get('weights_sha256')} differ from native's")
    return "\n".join(lines), failed


def _figure(value: float | None) -> str:
    """A table's figure, or ``-`` where there is none."""
    return "-" if value is None else f"{value:.0f}"


def check_way(args: argparse.Namespace, way: str, runtime: Any) -> dict[str, dict[str, Any]]:
    """The four checks of ``way`` (each failed by name where its runtime could not be made)."""
    if runtime is None:
        return {k: {"ok": False, "error": "no runtime"} for k in ("gpus", "digits", "resnet50", "signal")}
    return {"gpus": measured(f"{way} gpus", lambda: check_gpus(runtime, args.gpus)),
            "digits": measured(f"{way} digits", lambda: digits(args, way)),
            "resnet50": measured(f"{way} resnet50", lambda: resnet50(runtime, args.steps)),
            "signal": measured(f"{way} signal", lambda: warning_signal(args, way))}


def main() -> int:
    """Run the checks and print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kit", type=Path, required=True, help="udocker, Horovod's sources, proot, runc")
    parser.add_argument("--work", type=Path, required=True, help="a folder of this user's for the containers and runs")
    parser.add_argument("--dataset", type=Path, help="the digits as hvdflow prepared them (default: KIT/dataset if "
                        "there, else prepared here, which needs TensorFlow in this Python)")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--epochs", type=int, default=5, help="the digits' epochs")
    parser.add_argument("--steps", type=int, default=40, help="ResNet-50's timed steps")
    parser.add_argument("--gpus", type=int, default=0, help="ranks, one per GPU (default: every GPU)")
    parser.add_argument("--distributed", choices=("ddp", "horovod"), default="ddp",
                        help="the trainer's data parallelism: DistributedDataParallel, or Horovod (built with NCCL by "
                        "scripts/gpu-horovod.sh into KIT/horovod)")
    parser.add_argument("--out", type=Path, help="JSON file for every result")
    parser.add_argument("--child-train", dest="way", help=argparse.SUPPRESS)
    parser.add_argument("--ranks", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--train-out", help=argparse.SUPPRESS)
    parser.add_argument("--timeline", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.kit, args.work = args.kit.resolve(), args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    os.chdir(args.work)  # udocker runs commands in the working directory, which must be bound
    if args.dataset is None:
        args.dataset = args.kit / "dataset" if (args.kit / "dataset" / "index.json").exists() else args.work / "dataset"
    args.dataset = args.dataset.resolve()
    if args.way:
        return train_child(args)
    try:
        import torch
    except ImportError:
        print(f"gpu_check: {sys.executable} has no PyTorch: set HVDFLOW_GPU_PYTHON to a Python with PyTorch built "
              "for CUDA", file=sys.stderr)
        return 2
    args.gpus = args.gpus or torch.cuda.device_count()
    if not args.gpus:
        print("gpu_check: PyTorch sees no GPU here (torch.cuda.device_count() is 0)", file=sys.stderr)
        return 2
    if args.distributed == "horovod" and not (args.kit / "horovod").is_dir():
        print(f"gpu_check: --distributed horovod needs Horovod built with NCCL in {args.kit / 'horovod'}: run "
              f"bash scripts/gpu-horovod.sh {args.kit}", file=sys.stderr)
        return 2
    ways = args.ways.split(",")
    prepare = {"dataset": str(args.dataset)}
    if not (args.dataset / "index.json").exists():
        prepare = measured("prepare", lambda: prepare_dataset(make_runtimes(args.kit, args.work, ["native"])["native"],
                                                               DIGITS, args.dataset, args.work / "prepare.log"))
    runtimes: dict[str, Any] = {}
    containers = measured("containers", lambda: runtimes.update(make_runtimes(args.kit, args.work, ways))
                          or {"ways": list(runtimes)})
    results = {way: check_way(args, way, runtimes.get(way)) for way in ways}
    text, failed = table(results)
    print(text)
    for way, found in results.items():
        if "report" in found["digits"]:
            print(f"\n## {way}\n{found['digits']['report']}", end="")
    if args.out:
        args.out.write_text(json.dumps({"prepare": prepare, "containers": containers, "results": results,
                                        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                        "distributed": args.distributed},
                                       indent=1) + "\n")
    for line in failed:
        print(f"FAILED {line}")
    return 1 if failed or "error" in prepare else 0


if __name__ == "__main__":
    sys.exit(main())
