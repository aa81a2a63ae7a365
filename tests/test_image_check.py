"""`hvdflow image check`'s judgement: every part an image lacks named, with what it blocks (the probe itself runs in
the real image in tests/test_smoke.py and tests/test_pipeline.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from hvdflow.launch.image_check import SOURCE_MODULES, Needs, judge, needs_of, refusal, table

GOOD: dict[str, Any] = {
    "python": "3.11.2",
    "tensorflow": {"version": "2.15.1", "keras": "2.15.0", "cuda_build": False, "cuda": None, "cudnn": None},
    "horovod": {"version": "0.28.1", "built": {"gloo": True, "mpi": True, "nccl": False, "cuda": False, "rocm": False,
                                               "ddl": False, "ccl": False}},
    "modules": {name: {"version": "1"} for name in ("numpy", "tifffile", "imagecodecs", "pyarrow", "sklearn")},
}
TRAIN_AND_PREPARE = Needs(train=True, launcher="gloo", sources=tuple(sorted(SOURCE_MODULES)))


def _failed(facts: dict[str, Any], needs: Needs = TRAIN_AND_PREPARE) -> dict[str, str]:
    return {p.name: p.blocks for p in judge(facts, needs) if not p.ok}


def test_the_image_hvdflow_builds_passes_every_part() -> None:
    parts = judge(GOOD, TRAIN_AND_PREPARE)
    assert all(p.ok for p in parts) and refusal("hvdflow-cpu", parts) is None
    assert {p.name for p in parts} >= {"python", "numpy", "tensorflow", "tf.keras", "horovod", "horovod gloo", "pyarrow"}
    assert "!" not in table("hvdflow-cpu", "sha256:x", parts)


def test_missing_and_too_old_parts_are_named_with_what_they_block() -> None:
    no_horovod = {**GOOD, "horovod": {"error": "ModuleNotFoundError: No module named 'horovod'"}}
    assert _failed(no_horovod) == {"horovod": "training"}
    keras3 = {**GOOD, "tensorflow": {**GOOD["tensorflow"], "version": "2.16.1", "keras": "3.3.3"}}
    assert _failed(keras3) == {"tensorflow": "training and preparation", "tf.keras": "training"}
    old = {**GOOD, "python": "3.7.16"}
    assert _failed(old) == {"python": "training and preparation"}
    no_prep = {**GOOD, "modules": {"numpy": {"version": "1.26.4"}}}
    failed = _failed(no_prep)
    assert failed["pyarrow"] == "preparation (bigearthnet-v2)" and failed["sklearn"] == "preparation (sklearn-digits)"
    assert failed["tifffile"] == "preparation (bigearthnet-v1, bigearthnet-v2, image-folder)"
    message = refusal("upstream", judge(no_horovod, TRAIN_AND_PREPARE))
    assert message == ("image upstream cannot run these jobs: horovod is ModuleNotFoundError: No module named 'horovod' "
                       "(needs >= 0.28; blocks training)")
    marked = [line.split()[1] for line in table("upstream", "sha256:x", judge(no_horovod, TRAIN_AND_PREPARE)).splitlines()
              if line.startswith("!")]
    assert marked == ["horovod"]


def test_only_what_the_jobs_use_is_asked_for() -> None:
    prepare_digits = needs_of(["prepare"], "gloo", False, ["sklearn-digits"])
    no_horovod = {**GOOD, "horovod": {"error": "missing"}, "modules": {"numpy": {"version": "1"}, "sklearn": {"version": "1"}}}
    assert _failed(no_horovod, prepare_digits) == {}, "an image that only prepares digits needs no Horovod nor tifffile"
    mpi_only = {**GOOD, "horovod": {**GOOD["horovod"], "built": {**GOOD["horovod"]["built"], "gloo": False}}}
    assert _failed(mpi_only, needs_of(["train"], "mpi", False, [])) == {}
    assert _failed(mpi_only, needs_of(["train"], "gloo", False, [])) == {"horovod gloo": "training"}
    gpu = needs_of(["train"], "gloo", True, [])
    assert _failed(GOOD, gpu) == {"horovod nccl": "training", "tensorflow CUDA": "training"}


TORCH_IMAGE: dict[str, Any] = {
    "python": "3.13.5",
    "tensorflow": {"error": "ModuleNotFoundError: No module named 'tensorflow'"},
    "torch": {"version": "2.6.0+debian", "cuda": None, "cuda_build": False, "torchvision": "0.21.0",
              "distributed": {"gloo": True, "nccl": False, "mpi": False}},
    "horovod": {"version": "0.28.1", "tensorflow_error": "ModuleNotFoundError: No module named 'tensorflow'",
                "torch_built": {"gloo": True, "mpi": False, "nccl": False, "cuda": False, "rocm": False, "ddl": False,
                                "ccl": False}},
    "modules": {"numpy": {"version": "2.2.4"}},
}
"""What the probe says of hvdflow-torch-cpu (as `hvdflow image check` printed it)."""


def test_pytorch_training_asks_for_torch_its_horovod_and_torch_distributed_not_tensorflow() -> None:
    torch_train = needs_of(["train"], "gloo", False, [], "pytorch")
    parts = judge(TORCH_IMAGE, torch_train)
    assert all(p.ok for p in parts), parts
    assert [p.name for p in parts] == ["python", "numpy", "torch", "torchvision", "horovod", "horovod.torch",
                                       "horovod.torch gloo", "horovod.torch mpi", "horovod.torch nccl",
                                       "torch.distributed gloo", "torch CUDA"]
    # the reverse of each: a TensorFlow image asked to train PyTorch, the torch image asked to train Keras
    assert refusal("hvdflow-cpu", judge(GOOD, torch_train)).startswith(
        "image hvdflow-cpu cannot run these jobs: torch is missing")
    assert _failed(TORCH_IMAGE, needs_of(["train"], "gloo", False, [])) == {
        "tensorflow": "training", "tf.keras": "training", "horovod.tensorflow": "training"}
    assert _failed(TORCH_IMAGE, needs_of(["train"], "mpi", False, [], "pytorch")) == {"horovod.torch mpi": "training"}
    assert _failed(TORCH_IMAGE, needs_of(["train"], "gloo", True, [], "pytorch")) == {
        "horovod.torch nccl": "training", "torch.distributed nccl": "training (distributed ddp)",
        "torch CUDA": "training"}


def test_the_host_knows_every_dataset_source_the_trainer_reads() -> None:
    from hvdflow.config.datasets import USER_READER
    from hvdflow_trainer.sources import SOURCES

    assert set(SOURCE_MODULES) == set(SOURCES) | {USER_READER}   # a user's reader: numpy only, its imports named


def test_the_probe_runs_on_a_python_without_the_stack_and_says_so(tmp_path: Path) -> None:
    # the host's interpreter has neither TensorFlow nor Horovod: the probe must report, not fail
    proc = subprocess.run([sys.executable, "-m", "hvdflow_trainer.probe"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.split("HVDFLOW-PROBE ", 1)[1])
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "error" in facts["horovod"]
    failed = {p.name for p in judge(facts, TRAIN_AND_PREPARE) if not p.ok}
    assert {"tensorflow", "horovod"} <= failed


@pytest.mark.parametrize("version, ok", [("3.8.0", True), ("3.7.16", False), ("3.10.12", True), ("none", False)])
def test_python_versions(version: str, ok: bool) -> None:
    assert next(p for p in judge({**GOOD, "python": version}, TRAIN_AND_PREPARE) if p.name == "python").ok is ok
