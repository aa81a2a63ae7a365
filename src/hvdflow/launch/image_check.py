"""Does an image hold what a job needs? Start it once, ask it (``hvdflow_trainer.probe``), judge every part.

Judged against what hvdflow's in-container code needs for each purpose: training (Python, TensorFlow with Keras 2 as
``tf.keras``, Horovod built with the launcher's controller, NCCL and a CUDA TensorFlow for a GPU image, numpy) and preparation
(TensorFlow to write TFRecords, numpy, and the libraries of the dataset sources it prepares). The facts are cached by
the image's digest beside udocker's files, so an image is started for this once; the run record holds them.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from hvdflow.errors import ImageError
from hvdflow.files.atomic import write_json_atomic
from hvdflow.runtime import Runtime
from hvdflow.text_table import aligned

MIN_PYTHON = (3, 8)
"""The oldest Python the in-container code's grammar allows."""
TENSORFLOW_RANGE = ((2, 9), (2, 16))
"""TensorFlow releases whose ``tf.keras`` is Keras 2 (2.16 ships Keras 3); 2.15.1 is the one proved (README)."""
MIN_HOROVOD = (0, 28)
MIN_TORCH = (2, 0)
SOURCE_MODULES = {
    "sklearn-digits": ("sklearn",),
    "bigearthnet-v1": ("tifffile", "imagecodecs"),
    "bigearthnet-v2": ("tifffile", "imagecodecs", "pyarrow"),
    "image-folder": ("tifffile", "imagecodecs"),
    "user-reader": (),  # numpy, as every preparation; what the user's reader imports is named when it is loaded
}
"""The libraries each dataset source's reader imports (``hvdflow_trainer.sources``)."""
PROBE_TIMEOUT = 600.0
_MARK = "HVDFLOW-PROBE "


@dataclass(frozen=True)
class Needs:
    """What the jobs that use an image need of it."""

    train: bool = False
    launcher: Optional[str] = None
    """``gloo`` or ``mpi``: the Horovod controller training needs."""
    gpu: bool = False
    sources: tuple[str, ...] = ()
    """The dataset sources it prepares (none: it prepares nothing)."""
    framework: str = "tensorflow"
    """What trains in it: ``tensorflow`` or ``pytorch``."""


@dataclass(frozen=True)
class Part:
    """One thing an image was judged on."""

    name: str
    found: str
    needed: str
    ok: bool
    blocks: str
    """What a failure blocks: ``training``, ``preparation`` or both."""


def _version(text: Any) -> tuple[int, ...]:
    numbers = []
    for piece in str(text).split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def judge(facts: dict[str, Any], needs: Needs) -> list[Part]:
    """Every part the jobs need, found or not, with what a missing or too-old one blocks."""
    purposes = [p for p, wanted in (("training", needs.train), ("preparation", bool(needs.sources))) if wanted]
    both = " and ".join(purposes)
    python = str(facts.get("python", "none"))
    parts = [Part("python", python, f">= {_dotted(MIN_PYTHON)}", _version(python) >= MIN_PYTHON, both)]
    numpy = facts.get("modules", {}).get("numpy", {})
    parts.append(Part("numpy", numpy.get("version") or numpy.get("error", "missing"), "importable", "version" in numpy, both))
    if needs.train and needs.framework == "pytorch":
        return parts + _torch_parts(facts, needs) + _source_parts(facts, needs)
    tf = facts.get("tensorflow", {})
    low, high = TENSORFLOW_RANGE
    tf_ok = "version" in tf and low <= _version(tf["version"]) < high
    parts.append(Part("tensorflow", tf.get("version") or tf.get("error", "missing"),
                      f">= {_dotted(low)}, < {_dotted(high)}", tf_ok, both))
    if needs.train:
        keras = str(tf.get("keras", "none"))
        parts.append(Part("tf.keras", keras, "Keras 2 (2.x)", _version(keras)[:1] == (2,), "training"))
        hvd = facts.get("horovod", {})
        found = hvd.get("version") or hvd.get("error", "missing")
        parts.append(Part("horovod", found, f">= {_dotted(MIN_HOROVOD)}",
                          "version" in hvd and _version(hvd["version"]) >= MIN_HOROVOD, "training"))
        built = hvd.get("built")
        if "version" in hvd:
            parts.append(Part("horovod.tensorflow", "imports" if built is not None else hvd.get("tensorflow_error", "?"),
                              "imports", built is not None, "training"))
        controllers = ([needs.launcher] if needs.launcher else []) + (["nccl"] if needs.gpu else [])
        for controller in controllers if built is not None else ():  # without Horovod, the part above says it
            have = bool(built.get(controller))
            parts.append(Part(f"horovod {controller}", "built" if have else "not built", "built", have, "training"))
        if needs.gpu:
            parts.append(Part("tensorflow CUDA", f"cuda {tf.get('cuda')}, cudnn {tf.get('cudnn')}"
                              if tf.get("cuda_build") else "CPU-only build", "a CUDA build", bool(tf.get("cuda_build")),
                              "training"))
    return parts + _source_parts(facts, needs)


def _source_parts(facts: dict[str, Any], needs: Needs) -> list[Part]:
    """The libraries of the dataset sources the image prepares."""
    parts = []
    modules = facts.get("modules", {})
    for name in sorted({m for source in needs.sources for m in SOURCE_MODULES.get(source, ())}):
        module = modules.get(name, {})
        users = ", ".join(s for s in needs.sources if name in SOURCE_MODULES.get(s, ()))
        parts.append(Part(name, module.get("version") or module.get("error", "missing"), "importable",
                          "version" in module, f"preparation ({users})"))
    return parts


def _torch_parts(facts: dict[str, Any], needs: Needs) -> list[Part]:
    """What PyTorch training needs: torch 2.x with torchvision; Horovod's torch API built with the launcher's
    controller (and NCCL on GPUs); torch.distributed's Gloo (NCCL on GPUs) for DistributedDataParallel."""
    torch = facts.get("torch", {})
    found = torch.get("version") or torch.get("error", "missing (an image from before the probe knew torch: "
                                                       "`hvdflow image check` again after removing its cached facts)")
    parts = [Part("torch", found, f">= {_dotted(MIN_TORCH)}", "version" in torch and _version(torch["version"]) >= MIN_TORCH,
                  "training"),
             Part("torchvision", str(torch.get("torchvision", "missing")), "importable",
                  _version(torch.get("torchvision", ""))[:1] == (0,), "training")]
    hvd = facts.get("horovod", {})
    parts.append(Part("horovod", hvd.get("version") or hvd.get("error", "missing"), f">= {_dotted(MIN_HOROVOD)}",
                      "version" in hvd and _version(hvd["version"]) >= MIN_HOROVOD, "training"))
    built = hvd.get("torch_built")
    if "version" in hvd:
        parts.append(Part("horovod.torch", "imports" if built is not None else hvd.get("torch_error", "?"), "imports",
                          built is not None, "training"))
    required = {needs.launcher, "nccl" if needs.gpu else None}
    for controller in ("gloo", "mpi", "nccl") if built is not None else ():  # every one said; the needed ones judged
        have = bool(built.get(controller))
        parts.append(Part(f"horovod.torch {controller}", "built" if have else "not built",
                          "built" if controller in required else "any", have or controller not in required, "training"))
    if "version" in torch:
        dist = torch.get("distributed", {})
        backend = "nccl" if needs.gpu else "gloo"
        parts.append(Part(f"torch.distributed {backend}", "available" if dist.get(backend) else
                          torch.get("distributed_error", "not built"), "available", bool(dist.get(backend)),
                          "training (distributed ddp)"))
        parts.append(Part("torch CUDA", f"cuda {torch.get('cuda')}" if torch.get("cuda_build") else "CPU-only build",
                          "a CUDA build" if needs.gpu else "any", bool(torch.get("cuda_build")) or not needs.gpu,
                          "training"))
    return parts


def table(image: str, digest: str, parts: list[Part]) -> str:
    """The parts as a table, failures marked with ``!``."""
    rows = [("", "part", "found", "needed", "blocks")] + [
        ("" if p.ok else "!", p.name, p.found[:70], p.needed, "" if p.ok else p.blocks) for p in parts]
    return "\n".join([f"image {image} ({digest})", *aligned(rows)]) + "\n"


def refusal(image: str, parts: list[Part]) -> Optional[str]:
    """The error naming the image and every part it lacks with what that blocks, or None when nothing is missing."""
    failed = [p for p in parts if not p.ok]
    if not failed:
        return None
    return (f"image {image} cannot run these jobs: "
            + "; ".join(f"{p.name} is {p.found} (needs {p.needed}; blocks {p.blocks})" for p in failed))


def probe(runtime: Runtime, digest: str, cache: Path, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """The image's facts: from the cache (keyed by ``digest``), else by running the probe in it once. A probe that
    failed for another reason than the image having no ``python3`` is not cached."""
    cached = cache / f"{digest.split(':', 1)[-1]}.json"
    if cached.is_file():
        return dict(json.loads(cached.read_text()))
    argv = runtime.command(["python3", "-m", "hvdflow_trainer.probe"], {}, [])
    try:
        proc = subprocess.run(argv, env=runtime.process_env(), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ImageError(f"image {digest}: the probe did not answer within {timeout:.0f} s") from None
    line = next((line for line in proc.stdout.splitlines() if line.startswith(_MARK)), None)
    if line is None:
        output = (proc.stdout + proc.stderr).strip()[-1500:]
        facts: dict[str, Any] = {"python": _python_of(output), "probe_error": output or f"exit {proc.returncode}"}
        if facts["python"] != "none":  # a failure of udocker or proot, not a fact of the image: ask again next time
            return facts
    else:
        facts = json.loads(line[len(_MARK):])
    cache.mkdir(parents=True, exist_ok=True)
    write_json_atomic(cached, facts)
    return facts


def _python_of(output: str) -> str:
    """What a failed probe says of the interpreter: none, or a version too old to run the probe."""
    if "python3: not found" in output or "No such file" in output or "not found" in output:
        return "none"
    return "unknown (the probe failed)"


@dataclass(frozen=True)
class ImageCheck:
    """The facts and the verdict, as the run record keeps them."""

    digest: str
    facts: dict[str, Any]
    parts: list[Part]

    @property
    def ok(self) -> bool:
        """Whether every part is there."""
        return all(p.ok for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        """The check as JSON."""
        return {"digest": self.digest, "ok": self.ok, "facts": self.facts, "parts": [asdict(p) for p in self.parts]}


def check_image(runtime: Runtime, digest: str, cache: Path, needs: Needs) -> ImageCheck:
    """Probe (once per digest) and judge the image against ``needs``."""
    facts = probe(runtime, digest, cache)
    return ImageCheck(digest, facts, judge(facts, needs))


def needs_of(purposes: Iterable[str], launcher: Optional[str], gpu: bool, sources: Iterable[str],
             framework: str = "tensorflow") -> Needs:
    """Needs from the purposes an image serves in a workflow (``train``, ``prepare``) and what trains in it."""
    wanted = set(purposes)
    return Needs(train="train" in wanted, launcher=launcher if "train" in wanted else None, gpu=gpu and "train" in wanted,
                 sources=tuple(sorted(set(sources))) if "prepare" in wanted else (), framework=framework)
