"""The dataset adapters on files in the distributed formats: listing, exclusions, labels, band order, bad samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dataset_files import BAND_SIZE, BANDS, band_pixels, write_ben_v1, write_ben_v2, write_geotiff, write_image_folder
from hvdflow_index import ChannelStats
from hvdflow_trainer.input_plan import assign_shards, plan_input
from hvdflow_trainer.sources import adapter
from hvdflow_trainer.sources.bigearthnet_labels import LABELS_19, LABELS_43, old_to_new, v1_label_indices
from hvdflow_trainer.sources.common import BadSample, Excluded, PrepareError, Progress, ordered

SPLIT = {"validation_fraction": 0.2, "test_fraction": 0.2, "seed": 5}


def v1_spec(data, **extra) -> dict:  # type: ignore[no-untyped-def]
    return {"source": "bigearthnet-v1", "path": str(data.root), "nomenclature": 19, "bands": list(BANDS),
            "seasonal_snow_list": str(data.snow_list), "cloud_shadow_list": str(data.cloud_list), **SPLIT, **extra}


@pytest.fixture(scope="module")
def ben_v1(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return write_ben_v1(tmp_path_factory.mktemp("v1"), 20)


def read_all(spec: dict) -> tuple[dict, dict]:  # type: ignore[type-arg]
    lister, make_reader = adapter(spec["source"])
    listing = lister(spec)
    read = make_reader(listing, spec)
    out = {}
    for sample in listing["samples"]:
        try:
            out[sample["id"]] = read(sample)
        except Excluded as exc:
            out[sample["id"]] = exc
    return listing, out


def test_nomenclature_mapping_is_the_published_one() -> None:
    mapping = old_to_new()
    assert len(LABELS_43) == 43 and len(LABELS_19) == 19
    assert sum(1 for v in mapping.values() if v is None) == 11
    assert sorted({v for v in mapping.values() if v is not None}) == list(range(19))
    assert v1_label_indices(["Sea and ocean", "Estuaries", "Pastures"], 19) == [4, 18]
    assert v1_label_indices(["Transitional woodland/shrub"], 19) == [LABELS_19.index("Transitional woodland, shrub")]
    assert v1_label_indices(["Airports"], 19) == []
    assert v1_label_indices(["Sea and ocean", "Estuaries"], 43) == [41, 42]


def test_v1_listing_excludes_snow_and_cloud_and_splits_by_seed(ben_v1) -> None:  # type: ignore[no-untyped-def]
    listing = adapter("bigearthnet-v1")[0](v1_spec(ben_v1))
    ids = [s["id"] for s in listing["samples"]]
    assert ben_v1.snow not in ids and ben_v1.cloud not in ids
    assert listing["excluded"] == {"seasonal_snow": 1, "cloud_or_shadow": 1}
    assert len(ids) == 21   # 20 labelled + the one with only a dropped class, excluded when its labels are read
    assert {s["split"] for s in listing["samples"]} == {"train", "validation", "test"}
    assert listing["feature_shape"] == [120, 120, 12] and listing["feature_dtype"] == "uint16"
    assert listing["class_names"] == list(LABELS_19)
    again = adapter("bigearthnet-v1")[0](v1_spec(ben_v1))
    assert again == listing


def test_v1_patches_read_in_band_order_on_the_10m_grid(ben_v1) -> None:  # type: ignore[no-untyped-def]
    listing, read = read_all(v1_spec(ben_v1))
    assert isinstance(read[ben_v1.no_label], Excluded) and read[ben_v1.no_label].reason == "no_19_class_label"
    for name, result in read.items():
        if name == ben_v1.no_label:
            continue
        pixels, labels, nbytes = result
        assert pixels.shape == (120, 120, 12) and pixels.dtype == np.uint16
        expected = sorted({v1_label_indices([n], 19)[0] for n in ben_v1.labels[name]})
        assert labels == expected
        for k, band in enumerate(BANDS):
            factor = 120 // BAND_SIZE[band]
            original = band_pixels(ben_v1.numbers[name], band, ben_v1.labels[name])
            assert np.array_equal(pixels[:, :, k], np.kron(original, np.ones((factor, factor), "uint16")))
        assert nbytes > 12 * 400


def test_v1_band_subset_and_43_classes(ben_v1) -> None:  # type: ignore[no-untyped-def]
    spec = v1_spec(ben_v1, bands=["B11", "B02"], nomenclature=43)
    listing, read = read_all(spec)
    assert listing["feature_shape"] == [120, 120, 2] and listing["class_names"] == list(LABELS_43)
    pixels, labels, _ = read[ben_v1.no_label]
    assert labels == [LABELS_43.index("Airports")]
    number = ben_v1.numbers[ben_v1.no_label]
    assert np.array_equal(pixels[::2, ::2, 0], band_pixels(number, "B11", ["Airports"]))
    assert np.array_equal(pixels[:, :, 1], band_pixels(number, "B02", ["Airports"]))


def test_v1_split_lists_decide_the_split(ben_v1, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    names = sorted(n for n in ben_v1.labels if n not in (ben_v1.snow, ben_v1.cloud))
    lists = {}
    for split, part in (("train", names[:10]), ("validation", names[10:13]), ("test", names[13:16])):
        lists[split] = tmp_path / f"{split}.csv"
        # the MM split files have a second column (the S1 patch): only the first counts
        lists[split].write_text("".join(f"{n},S1A_IW_GRDH_1SDV_20170613T165043_33UUP_61_41\n" for n in part))
    lists["test"].write_text(lists["test"].read_text() + "S2A_MSIL2A_20170613T101031_9_99\n")
    listing = adapter("bigearthnet-v1")[0](v1_spec(ben_v1, split_lists={k: str(v) for k, v in lists.items()}))
    by_split = {s["id"]: s["split"] for s in listing["samples"]}
    assert [n for n in names[:10] if by_split[n] == "train"] == names[:10]
    assert by_split[names[11]] == "validation" and by_split[names[14]] == "test"
    assert listing["excluded"]["not_in_split_lists"] == len(names) - 16
    missing = next(s for s in listing["samples"] if s["id"] == "S2A_MSIL2A_20170613T101031_9_99")
    read = adapter("bigearthnet-v1")[1](listing, v1_spec(ben_v1))
    with pytest.raises(BadSample, match="S2A_MSIL2A_20170613T101031_9_99: patch folder missing"):
        read(missing)


def test_v1_bad_files_are_named(tmp_path: Path) -> None:
    data = write_ben_v1(tmp_path, 3)
    names = [n for n in sorted(data.labels) if n not in (data.snow, data.cloud, data.no_label)]
    wrong = data.root / names[0] / f"{names[0]}_B05.tif"
    write_geotiff(wrong, np.zeros((120, 120), "uint16"), 20)
    corrupt = data.root / names[1] / f"{names[1]}_B12.tif"
    corrupt.write_bytes(b"II*\x00garbage")
    label_file = data.root / names[2] / f"{names[2]}_labels_metadata.json"
    label_file.write_text(json.dumps({"labels": ["Pastures", "Lava fields"]}))
    listing = adapter("bigearthnet-v1")[0](v1_spec(data))
    read = adapter("bigearthnet-v1")[1](listing, v1_spec(data))
    samples = {s["id"]: s for s in listing["samples"]}
    with pytest.raises(BadSample, match=r"_B05.tif: shape 120x120, but band B05 is 60x60"):
        read(samples[names[0]])
    with pytest.raises(BadSample, match=r"_B12.tif: unreadable"):
        read(samples[names[1]])
    with pytest.raises(BadSample, match=r"labels_metadata.json: unknown CORINE class name 'Lava fields'"):
        read(samples[names[2]])
    with pytest.raises(PrepareError, match="no BigEarthNet v1 patch folders"):
        adapter("bigearthnet-v1")[0](v1_spec(data, path=str(tmp_path)))


def test_v2_labels_and_split_come_from_the_metadata_table(tmp_path: Path) -> None:
    data = write_ben_v2(tmp_path, 12)
    spec = {"source": "bigearthnet-v2", "path": str(data.root), "metadata": str(data.metadata), "nomenclature": 19,
            "bands": list(BANDS), **SPLIT}
    listing, read = read_all(spec)
    assert len(listing["samples"]) == 12 and listing["excluded"] == {"seasonal_snow": 0, "cloud_or_shadow": 0}
    rows = {r["patch_id"]: r for r in data.rows}
    for sample in listing["samples"]:
        row = rows[sample["id"]]
        assert sample["split"] == row["split"]
        pixels, labels, _ = read[sample["id"]]
        assert [LABELS_19[i] for i in labels] == sorted(row["labels"], key=LABELS_19.index)
        assert np.array_equal(pixels[::6, ::6, 0], band_pixels(row["_number"], "B01", row["_planted"]))
        assert Path(sample["path"]).parent.name == "S2A_MSIL2A_20170613T101031_N9999_R022_T33UUP"


def test_v2_flags_and_bad_tables(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = write_ben_v2(tmp_path, 4)
    table = pq.read_table(data.metadata).to_pydict()
    table["contains_seasonal_snow"][0] = True
    pq.write_table(pa.table(table), data.metadata)
    spec = {"source": "bigearthnet-v2", "path": str(data.root), "metadata": str(data.metadata), "nomenclature": 19,
            "bands": list(BANDS), **SPLIT}
    listing = adapter("bigearthnet-v2")[0](spec)
    assert listing["excluded"]["seasonal_snow"] == 1 and len(listing["samples"]) == 3
    table["split"][1] = "val"
    pq.write_table(pa.table(table), data.metadata)
    with pytest.raises(PrepareError, match="has split 'val', expected one of train, validation, test"):
        adapter("bigearthnet-v2")[0](spec)
    data.metadata.write_bytes(b"not parquet")
    with pytest.raises(PrepareError, match="cannot read the metadata table"):
        adapter("bigearthnet-v2")[0](spec)


def test_image_folder_classes_shapes_and_stratified_split(tmp_path: Path) -> None:
    classes = write_image_folder(tmp_path / "cells", 10)
    spec = {"source": "image-folder", "path": str(tmp_path / "cells"), **SPLIT}
    listing, read = read_all(spec)
    assert listing["class_names"] == classes and listing["feature_shape"] == [16, 16, 3]
    assert listing["feature_dtype"] == "uint8" and listing["task"] == "single-label"
    for label in range(2):
        splits = [s["split"] for s in listing["samples"] if s["labels"] == [label]]
        assert splits.count("test") == 2 and splits.count("validation") == 2 and splits.count("train") == 6
    pixels, labels, _ = read["cells_b/img003.png"]
    assert pixels.shape == (16, 16, 3) and labels == [1] and pixels[..., 2].min() >= 150
    from PIL import Image

    Image.fromarray(np.zeros((16, 20, 3), "uint8")).save(tmp_path / "cells" / "cells_a" / "img999.png")
    listing = adapter("image-folder")[0](spec)
    odd = next(s for s in listing["samples"] if s["id"] == "cells_a/img999.png")
    with pytest.raises(BadSample, match=r"img999.png: is 16x20x3 uint8; the dataset's images are 16x16x3 uint8"):
        adapter("image-folder")[1](listing, spec)(odd)


def test_a_listing_of_class_folders_says_how_far_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    write_image_folder(tmp_path / "cells", 3)
    monkeypatch.setattr(Progress, "seconds", 0.0)  # a line at every class folder (every 30 s by default)
    adapter("image-folder")[0]({"source": "image-folder", "path": str(tmp_path / "cells"), **SPLIT})
    lines = capsys.readouterr().out.splitlines()
    root = tmp_path / "cells"
    assert [line.rsplit(", ", 1)[0] for line in lines] == [
        f"listing {root}: 0 of 2 class folders, 0 samples so far", f"listing {root}: 1 of 2 class folders, 3 samples so far"]
    assert all(line.endswith(" s") for line in lines)
    monkeypatch.setattr(Progress, "seconds", 30.0)
    adapter("image-folder")[0]({"source": "image-folder", "path": str(tmp_path / "cells"), **SPLIT})
    assert capsys.readouterr().out == ""  # a listing shorter than the interval says nothing


def test_sequences_stack_frames_in_numeric_order(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "seq", 3, sequence=True, frames=11)
    spec = {"source": "image-folder", "path": str(tmp_path / "seq"), "sequence": True, **SPLIT}
    listing, read = read_all(spec)
    assert listing["feature_shape"] == [16, 16, 11] and listing["frames"] == 11 and listing["feature_dtype"] == "uint16"
    pixels, labels, _ = read["polyq/mouse01"]
    import tifffile

    for t in range(11):   # frame_10 and frame_11 come after frame_9, not after frame_1
        assert np.array_equal(pixels[:, :, t], tifffile.imread(tmp_path / "seq" / "polyq" / "mouse01" / f"frame_{t + 1}.tif"))
    (tmp_path / "seq" / "healthy" / "mouse00" / "frame_11.tif").unlink()
    sample = next(s for s in listing["samples"] if s["id"] == "healthy/mouse00")
    with pytest.raises(BadSample, match="mouse00: has 10 frames; the dataset's sequences have 11"):
        adapter("image-folder")[1](listing, spec)(sample)


def test_training_split_is_shuffled_once_and_other_splits_keep_order() -> None:
    samples = [{"id": str(i), "split": "train" if i < 50 else "test"} for i in range(60)]
    out = ordered(samples, 3)
    assert [s["id"] for s in out[50:]] == [str(i) for i in range(50, 60)]
    assert sorted(int(s["id"]) for s in out[:50]) == list(range(50))
    assert [s["id"] for s in out[:50]] != [str(i) for i in range(50)]
    assert ordered(samples, 3) == out


def test_channel_stats_merge_exactly() -> None:
    rng = np.random.RandomState(0)
    images = [rng.randint(0, 10000, (5, 7, 3)).astype("uint16") for _ in range(6)]
    halves = [ChannelStats(), ChannelStats()]
    for i, image in enumerate(images):
        halves[i % 2].add_image(image)
    merged = ChannelStats.from_json(json.loads(json.dumps(halves[0].to_json())))
    merged.merge(halves[1])
    stacked = np.concatenate([i.reshape(-1, 3) for i in images]).astype("float64")
    norm = merged.normalization()
    assert np.allclose(norm["mean"], stacked.mean(axis=0), rtol=1e-12)
    assert np.allclose(norm["std"], stacked.std(axis=0), rtol=1e-10)
    constant = ChannelStats()
    constant.add_image(np.full((2, 2, 1), 7, "uint16"))
    assert constant.normalization()["std"] == [1.0]


def test_input_plan_reads_whole_shards_when_they_balance() -> None:
    assert assign_shards([10, 10, 10, 10], 2) == [[0, 2], [1, 3]]
    assert plan_input([10, 10, 10, 10], 2) == ("files", [[0, 2], [1, 3]], 20)
    assert plan_input([100, 96, 98, 97], 2) == ("files", [[0, 1], [2, 3]], 195)   # 100+96 and 98+97
    assert plan_input([898, 360], 2) == ("records", None, 629)   # uneven shards: every other record instead
    assert plan_input([5], 2) == ("records", None, 2)
    with pytest.raises(ValueError, match="fewer than the 4 ranks"):
        plan_input([3], 4)
