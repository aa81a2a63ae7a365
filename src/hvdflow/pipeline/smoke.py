"""The smoke job: prepare the digits and train the MLP with N Horovod ranks; every rank must end identical."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from hvdflow.config.experiment import TrainSpec
from hvdflow.errors import LaunchError
from hvdflow.files.atomic import write_json_atomic
from hvdflow.pipeline.resume import identity_of
from hvdflow.pipeline.stages import prepare_dataset, train
from hvdflow.runtime import Runtime
from hvdflow.runtime.record import ContainerRecord
from hvdflow_wire import WireError
from hvdflow_wire.metrics import TrainingMetrics
from hvdflow_wire.usage import DEFAULT_USAGE_SECONDS

DIGITS = {"name": "digits", "source": "sklearn-digits", "validation_fraction": 0.1, "test_fraction": 0.2, "seed": 42,
          "shard_size_mb": 64, "skip_bad_samples": False}


def smoke_spec(ranks: int, epochs: int, usage_seconds: float = DEFAULT_USAGE_SECONDS) -> TrainSpec:
    """The smoke experiment: a 64-unit MLP, SGD with momentum, fixed seed; each rank's use sampled every
    ``usage_seconds`` (0: not sampled)."""
    return TrainSpec(ranks=ranks, model="mlp", hidden_units=64, epochs=epochs, batch_size=32, learning_rate=0.01,
                     momentum=0.9, warmup_epochs=1, seed=1234, usage_seconds=usage_seconds)


def run_smoke(runtime: Runtime, record: ContainerRecord, launcher: str, ranks: int, out_dir: Path, epochs: int = 5,
              fail_rank: int = -1, usage_seconds: float = DEFAULT_USAGE_SECONDS) -> dict[str, object]:
    """Run the smoke job in ``runtime`` (``record``'s container); write and return ``summary.json``."""
    (out_dir / "summary.json").unlink(missing_ok=True)
    dataset = out_dir / "dataset"
    prepare_dataset(runtime, DIGITS, dataset, out_dir / "logs" / "prepare.log")
    fail = f"{fail_rank}:1" if fail_rank >= 0 else None
    spec = smoke_spec(ranks, epochs, usage_seconds)
    identity = identity_of(asdict(spec), record.digest, dataset / "index.json")
    results = train(runtime, launcher, spec, dataset, out_dir / "train", out_dir / "logs" / "train", identity, fail=fail)
    try:
        metrics = TrainingMetrics.read(str(out_dir / "train" / "metrics.json"))
    except WireError as exc:
        raise LaunchError(f"malformed training metrics: {exc}") from None
    summary: dict[str, object] = {
        "launcher": launcher,
        "ranks": ranks,
        "controller": results[0].controller,
        "weights_sha256": results[0].weights_sha256,
        "val_accuracy": metrics.final["val_accuracy"],
        "image": record.image,
        "reference": record.reference,
        "digest": record.digest,
        "container": record.container,
        "execmode": record.execmode,
        **runtime.engine(),
        "tensorflow": results[0].tensorflow,
        "horovod": results[0].horovod,
    }
    write_json_atomic(out_dir / "summary.json", summary)
    return summary
