"""Real datasets end to end as the ordinary user: BigEarthNet v1 and v2, an image folder and microscopy-like
sequences, written in their distributed formats, prepared in parallel chunks, trained with 2 ranks in udocker,
evaluated; plus bad samples reported by path, or skipped and counted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import yaml

from conftest import HpcUser, Registry, _chown_tree
from dataset_files import BANDS, band_pixels, write_ben_v1, write_ben_v2, write_image_folder
from hvdflow_trainer.sources.bigearthnet_labels import LABELS_19
from hvdflow_trainer.tfrecord import framed
from hvdflow_trainer.tfrecord import parse_example as example
from hvdflow_trainer.tfrecord import read_records as records
from pipeline_run import PNG, Pipeline

pytestmark = [pytest.mark.image, pytest.mark.e2e]

EXPERIMENT = {"image": "hvdflow-cpu", "ranks": 2, "model": "small-cnn", "hidden_units": 32, "epochs": 12,
              "batch_size": 4, "learning_rate": 0.01}


@pytest.fixture(scope="module")
def raw(hpc_user: HpcUser) -> dict:  # type: ignore[type-arg]
    """The four datasets, written once, owned by the user."""
    base = hpc_user.tests_dir / "raw-data"
    written = {"v1": write_ben_v1(base / "v1", 60), "v2": write_ben_v2(base / "v2", 60),
               "cells": write_image_folder(base / "cells", 16, size=32), "sequences": write_image_folder(base / "seq", 12,
                                                                                                  sequence=True)}
    _chown_tree(base, hpc_user.uid, hpc_user.gid)
    return {"base": base, **written}


def dataset_config(raw: dict) -> dict:  # type: ignore[type-arg]
    """The config's datasets: each one as a user would point at it."""
    v1, v2 = raw["v1"], raw["v2"]
    common = {"image": "hvdflow-cpu", "chunks": 2, "validation_fraction": 0.2, "test_fraction": 0.25, "seed": 3}
    return {
        "ben_v1": {"source": "bigearthnet-v1", "path": str(v1.root), "seasonal_snow_list": str(v1.snow_list),
                   "cloud_shadow_list": str(v1.cloud_list), "shard_size_mb": 1, **common},
        "ben_v2": {"source": "bigearthnet-v2", "path": str(v2.root), "metadata": str(v2.metadata), **common},
        "cells": {"source": "image-folder", "path": str(raw["base"] / "cells"), **common},
        "sequences": {"source": "image-folder", "path": str(raw["base"] / "seq"), "sequence": True, **common},
    }


def configure(pipeline: Pipeline, datasets: dict, experiments: dict) -> None:  # type: ignore[type-arg]
    path = pipeline.root / "config" / "config.yaml"
    path.write_text(yaml.safe_dump({"datasets": datasets, "experiments": experiments}, sort_keys=False))


@pytest.fixture(scope="module")
def trained(hpc_user: HpcUser, registry: Registry, udocker_dir: Path, raw: dict) -> Iterator[Pipeline]:  # type: ignore[type-arg]
    """One snakemake call: four datasets prepared in 2 chunks each, a model trained and evaluated on each."""
    pipeline = Pipeline(hpc_user, registry, udocker_dir)
    experiments = {name: {"dataset": name, **EXPERIMENT} for name in ("ben_v1", "ben_v2", "cells", "sequences")}
    experiments["cells_resnet"] = {**EXPERIMENT, "dataset": "cells", "model": "resnet50", "epochs": 1}
    configure(pipeline, dataset_config(raw), experiments)
    proc = pipeline.snakemake()
    assert proc.returncode == 0, proc.stderr[-6000:]
    yield pipeline


def test_bigearthnet_v1_counts_exclusions_and_19_class_labels(trained: Pipeline, raw: dict) -> None:  # type: ignore[type-arg]
    index = trained.json("resources/datasets/ben_v1/index.json")
    assert index["excluded"] == {"seasonal_snow": 1, "cloud_or_shadow": 1, "no_19_class_label": 1}
    assert sum(s["records"] for s in index["splits"].values()) == 60
    assert index["class_names"] == list(LABELS_19) and index["task"] == "multi-label"
    assert index["feature_shape"] == [120, 120, 12] and index["channel_names"] == list(BANDS)
    assert index["preparation"]["chunks"] == 2 and index["skipped"]["count"] == 0
    files = [s["file"] for split in index["splits"].values() for s in split["shards"]]
    assert {f.split("/")[0] for f in files} == {"chunk-0", "chunk-1"}
    for split in index["splits"].values():
        for shard in split["shards"]:
            path = trained.root / "resources/datasets/ben_v1" / shard["file"]
            assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"]
            assert sum(1 for _ in records(path)) == shard["records"]
            # TensorFlow's framing and CRC-32C, as the PyTorch trainer's reader and TensorBoard writer make them
            assert b"".join(framed(r) for r in records(path)) == path.read_bytes()
            assert shard["bytes"] <= 1e6 + 400_000   # the 1 MB target, overshot by at most one record


def test_shards_hold_the_bands_in_order_on_the_10m_grid_with_mapped_labels(trained: Pipeline, raw: dict) -> None:  # type: ignore[type-arg]
    v1 = raw["v1"]
    root = trained.root / "resources/datasets/ben_v1"
    index = trained.json("resources/datasets/ben_v1/index.json")
    manifest = json.loads((root / "manifest" / "chunk-1.json").read_text())
    first_test = next(s for s in manifest if s["split"] == "test")
    record = example(next(records(root / "chunk-1" / "test-00000.tfrecord")))
    pixels = np.frombuffer(record["x"], "<u2").reshape(120, 120, 12)
    number, labels = v1.numbers[first_test["id"]], v1.labels[first_test["id"]]
    for k, band in enumerate(BANDS):
        factor = {20: 6, 60: 2, 120: 1}[band_pixels(number, band, labels).shape[0]]
        assert np.array_equal(pixels[::factor, ::factor, k], band_pixels(number, band, labels)), band
    expected = sorted({{"Coniferous forest": 9, "Pastures": 4, "Sea and ocean": 18, "Estuaries": 18}[n] for n in labels})
    assert record["y"] == expected
    means = index["normalization"]["mean"]
    assert means[BANDS.index("B02")] < means[BANDS.index("B03")] < means[BANDS.index("B04")]   # 200, 300, 400 + noise


def test_bigearthnet_v2_takes_labels_and_split_from_the_metadata_table(trained: Pipeline, raw: dict) -> None:  # type: ignore[type-arg]
    index = trained.json("resources/datasets/ben_v2/index.json")
    wanted = {split: sum(1 for r in raw["v2"].rows if r["split"] == split) for split in ("train", "validation", "test")}
    assert {k: v["records"] for k, v in index["splits"].items()} == wanted


def test_each_model_learns_the_planted_signal(trained: Pipeline) -> None:
    for name in ("ben_v1", "ben_v2"):
        evaluation = trained.json(f"results/{name}/evaluation.json")
        assert evaluation["task"] == "multi-label"
        assert evaluation["micro"]["f1"] >= 0.8, (name, evaluation["micro"])
        assert evaluation["mean_average_precision"] >= 0.8, (name, evaluation["mean_average_precision"])
        planted = {"Coniferous forest", "Pastures", "Marine waters"}
        assert {c for c, m in evaluation["per_class"].items() if m["support"]} == planted
        f1 = {c: evaluation["per_class"][c]["f1"] for c in planted}
        assert min(f1.values()) >= 0.7, (name, f1)
    for name in ("cells", "sequences"):
        evaluation = trained.json(f"results/{name}/evaluation.json")
        assert evaluation["accuracy"] >= 0.8, (name, evaluation["accuracy"])   # chance is 0.5
    for name in ("ben_v1", "ben_v2", "cells", "sequences"):
        assert (trained.root / f"results/{name}/plots/per_class.png").read_bytes().startswith(PNG)
        assert trained.json(f"results/{name}/run.json")["ranks"][1]["rank"] == 1
    assert not (trained.root / "results/ben_v1/plots/confusion_matrix.png").exists()
    # ResNet-50 (BatchNorm statistics averaged over the ranks, or the ranks would end different and the run fail)
    resnet = trained.json("results/cells_resnet/run.json")
    assert len({r["weights_sha256"] for r in resnet["ranks"]}) == 1 and resnet["config"]["experiment"]["model"] == "resnet50"
    assert trained.json("results/cells_resnet/evaluation.json")["samples"] == 8
    sequences = trained.json("resources/datasets/sequences/index.json")
    assert sequences["feature_shape"] == [16, 16, 3] and sequences["frames"] == 3


def test_preparing_again_does_nothing(trained: Pipeline) -> None:
    shard = trained.root / "resources/datasets/ben_v1/chunk-0/train-00000.tfrecord"
    before = shard.stat().st_mtime_ns
    again = trained.snakemake()
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
    assert shard.stat().st_mtime_ns == before


def test_a_bad_band_file_is_named_or_skipped_and_counted(hpc_user: HpcUser, registry: Registry, udocker_dir: Path,
                                                        tmp_path: Path) -> None:
    base = hpc_user.tests_dir / "raw-bad"
    v1 = write_ben_v1(base, 10, seed=4)
    victim = sorted(n for n in v1.labels if n not in (v1.snow, v1.cloud, v1.no_label))[2]
    broken = v1.root / victim / f"{victim}_B8A.tif"
    broken.write_bytes(b"this is not a TIFF")
    _chown_tree(base, hpc_user.uid, hpc_user.gid)
    spec = {"source": "bigearthnet-v1", "path": str(v1.root), "image": "hvdflow-cpu", "chunks": 2}
    pipeline = Pipeline(hpc_user, registry, udocker_dir)
    configure(pipeline, {"bad": spec}, {"bad": {"dataset": "bad", **EXPERIMENT}})
    proc = pipeline.snakemake("--until", "prepare_dataset")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"bad sample {broken}: unreadable" in output and "set skip_bad_samples: true" in output
    assert not (pipeline.root / "resources/datasets/bad/index.json").exists()
    configure(pipeline, {"bad": {**spec, "skip_bad_samples": True}}, {"bad": {"dataset": "bad", **EXPERIMENT}})
    proc = pipeline.snakemake("--until", "prepare_dataset")
    assert proc.returncode == 0, proc.stderr[-5000:]
    index = pipeline.json("resources/datasets/bad/index.json")
    assert index["skipped"]["count"] == 1 and index["skipped"]["samples"][0]["path"] == str(broken)
    # no snow or cloud list given this time: 10 labelled + the snowy + the cloudy patch, less the bad one
    assert sum(s["records"] for s in index["splits"].values()) == 10 + 2 - 1
    assert index["excluded"]["no_19_class_label"] == 1


def test_a_missing_dataset_folder_is_refused_before_any_job(hpc_user: HpcUser, registry: Registry,
                                                            udocker_dir: Path) -> None:
    pipeline = Pipeline(hpc_user, registry, udocker_dir)
    configure(pipeline, {"gone": {"source": "image-folder", "path": "/nonexistent/cells", "image": "hvdflow-cpu"}},
              {"gone": {"dataset": "gone", **EXPERIMENT}})
    proc = pipeline.snakemake("--dry-run")
    assert proc.returncode != 0 and "datasets.gone.path: /nonexistent/cells does not exist" in proc.stdout + proc.stderr
