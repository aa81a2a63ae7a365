"""A user's own data format, the parts that need no image: the example reader (examples/npy-reader) listed and read
by hvdflow's adapter, every mistake in a reader named in the user's terms (the item, the file and line), and the
config's reader form checked at parse time, bound and recorded."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import yaml

from conftest import REPO
from hvdflow.config.datasets import USER_READER, bind_paths, check_dataset, input_paths, resolved_spec, source_name, task_of
from hvdflow.config.parse_time import schema_problem
from hvdflow.config.user_code import code_files, tree_sha256
from hvdflow.errors import ConfigError
from hvdflow_trainer.sources import adapter, user_reader
from hvdflow_trainer.sources.common import BadSample, PrepareError
from hvdflow_trainer.user_code import UserCodeError

EXAMPLE = REPO / "examples" / "npy-reader"
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def write_npy_folder(folder: Path, per_class: int = 10, shape: tuple[int, ...] = (8, 8)) -> Path:
    """Arrays of three classes (a pattern per class plus noise) and their labels.csv, as the example reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = []
    for k, name in enumerate(["alpha", "beta", "gamma"]):
        for i in range(per_class):
            array = (rng.integers(0, 60, shape) + 60 * k).astype(np.uint8)
            file = f"{name}-{i:03d}.npy"
            np.save(folder / file, array)
            rows.append((file, name))
    with open(folder / "labels.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("file", "label"), *rows])
    return folder


@pytest.fixture(autouse=True)
def fresh_modules() -> Iterator[None]:
    """Each test imports the user's modules afresh (a module imported once stays in sys.modules)."""
    yield
    for name in [n for n in sys.modules if n in ("npy_labels", "broken_reader")]:
        del sys.modules[name]


def spec_of(data: Path, code: Path = EXAMPLE, **source: Any) -> dict[str, Any]:
    return {"name": "cells", "path": str(data), "validation_fraction": 0.2, "test_fraction": 0.2, "seed": 3,
            "source": {"code": str(code), "read": "npy_labels:read", **source}}


def test_the_example_lists_splits_by_class_and_reads_every_item(tmp_path: Path) -> None:
    data = write_npy_folder(tmp_path / "data")
    spec = spec_of(data)
    list_samples, make_reader = adapter(spec["source"])
    listing = list_samples(spec)
    assert listing["class_names"] == ["alpha", "beta", "gamma"] and listing["task"] == "single-label"
    assert (listing["feature_shape"], listing["feature_dtype"]) == ([8, 8, 1], "uint8")
    samples = listing["samples"]
    assert len(samples) == 30 and len({s["id"] for s in samples}) == 30
    for k in range(3):   # per class: 10 items, 2 test, 2 validation, 6 train
        splits = [s["split"] for s in samples if s["labels"] == [k]]
        assert sorted(splits) == ["test"] * 2 + ["train"] * 6 + ["validation"] * 2
    read = make_reader(listing, spec)
    pixels, labels, nbytes = read(samples[0])
    assert pixels.shape == (8, 8, 1) and labels == samples[0]["labels"] and nbytes == 64
    assert np.array_equal(pixels[:, :, 0], np.load(data / samples[0]["id"]))


def test_an_item_of_another_shape_or_type_is_a_bad_sample_named_by_its_id(tmp_path: Path) -> None:
    data = write_npy_folder(tmp_path / "data")
    np.save(data / "beta-004.npy", np.zeros((8, 9), np.uint8))
    np.save(data / "beta-005.npy", np.zeros((8, 8), np.float32))
    spec = spec_of(data)
    listing = user_reader.list_samples(spec)
    read = user_reader.reader(listing, spec)
    with pytest.raises(BadSample, match=r"^beta-004\.npy: npy_labels:read returned 8x9x1 uint8; the dataset's items are "
                                        r"8x8x1 uint8"):
        read({"id": "beta-004.npy", "labels": [1]})
    with pytest.raises(BadSample, match=r"^beta-005\.npy: .* returned 8x8x1 float32"):
        read({"id": "beta-005.npy", "labels": [1]})


BROKEN = {
    "not a pair": ("def items(path):\n    return ['a', 'b', 'c']\n", r"returned list; expected \(class_names, items\)"),
    "one class": ("def items(path):\n    return ['a'], [('x', 0)]\n", r"returned 1 class name\(s\)"),
    "label out of range": ("def items(path):\n    return ['a', 'b'], [('x', 0), ('y', 2)]\n",
                           r"item y has label 2; expected an index of 0\.\.1"),
    "twice": ("def items(path):\n    return ['a', 'b'], [('x', 0), ('x', 1)]\n", r"item id x appears twice"),
    "raises": ("def items(path):\n    rows = {}\n    return rows['labels']\n",
               r"broken_reader:items raised KeyError: 'labels' \(at .*broken_reader\.py, line 3\)"),
    "options": ("def items(path, labels_file):\n    return ['a', 'b'], []\n", r"cannot be called with"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_listing_that_hvdflow_cannot_use_is_named_with_the_users_function(tmp_path: Path, case: str) -> None:
    text, message = BROKEN[case]
    code = tmp_path / "code"
    code.mkdir()
    (code / "broken_reader.py").write_text(text + "\ndef read(path, item):\n    return None\n")
    spec = spec_of(tmp_path, code, read="broken_reader:read")
    with pytest.raises(UserCodeError, match=message):
        user_reader.list_samples(spec)


def test_arrays_of_a_type_the_records_do_not_hold_are_named_with_the_fix(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        np.save(data / f"{i}.npy", np.zeros((4, 4), np.int64))
    (data / "labels.csv").write_text("file,label\n" + "".join(f"{i}.npy,{'ab'[i % 2]}\n" for i in range(4)))
    with pytest.raises(PrepareError, match=r"npy_labels:read returned int64 for item 0\.npy; supported: uint8, uint16, "
                                           r"float32 \(convert in your reader\)"):
        user_reader.list_samples(spec_of(data))


def test_the_config_form_is_checked_bound_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = write_npy_folder(tmp_path / "data")
    (tmp_path / "readers").mkdir()
    (tmp_path / "readers" / "npy_labels.py").write_text((EXAMPLE / "npy_labels.py").read_text())
    entry = {"source": {"code": "readers", "read": "npy_labels:read", "options": {"labels_file": "labels.csv"}},
             "image": "hvdflow-cpu", "path": "data"}
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert schema_problem({**shipped, "datasets": {**shipped["datasets"], "cells": entry}}, SCHEMA) is None
    assert source_name(entry) == USER_READER and task_of(entry) == "single-label"
    check_dataset("cells", entry)
    spec = resolved_spec("cells", entry)
    code = tmp_path / "readers"
    assert spec["source"]["code"] == str(code) and spec["source"]["options"] == {"labels_file": "labels.csv"}
    assert spec["source"]["tree_sha256"] == tree_sha256(code_files(code))
    assert bind_paths(spec) == sorted([data, code])
    assert input_paths(entry) == sorted(["data", "readers/npy_labels.py"])
    # mistakes named by their key, before any job
    with pytest.raises(ConfigError, match=r"datasets\.cells\.source\.code: nowhere is not a folder"):
        check_dataset("cells", {**entry, "source": {**entry["source"], "code": "nowhere"}})
    with pytest.raises(ConfigError, match=r"datasets\.cells\.source\.list: other:items: no module other in "):
        check_dataset("cells", {**entry, "source": {**entry["source"], "list": "other:items"}})
    (code / "broken.py").write_text("def read(path, item):\n    return [\n")
    with pytest.raises(ConfigError, match=r"datasets\.cells\.source\.read: \S+/readers/broken\.py, line 2: '\[' was "
                                          r"never closed \(the file does not parse"):
        check_dataset("cells", {**entry, "source": {**entry["source"], "read": "broken:read"}})
    with pytest.raises(ConfigError, match=r"datasets\.cells\.path is required for source user-reader"):
        check_dataset("cells", {key: value for key, value in entry.items() if key != "path"})
    misspelt = {**entry, "source": {**entry["source"], "reader": "x:y"}}
    bad = schema_problem({**shipped, "datasets": {**shipped["datasets"], "cells": misspelt}}, SCHEMA)
    assert bad is not None and "datasets.cells.source" in bad, bad
