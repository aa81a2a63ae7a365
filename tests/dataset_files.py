"""Small datasets written in the exact formats they are distributed in, with a planted signal a model can learn.

BigEarthNet: real single-band uint16 GeoTIFFs (tifffile, GeoTIFF tags for UTM zone 29N) at the three band sizes,
label JSON with CORINE names as the archive has them, the snow and cloud lists, the split lists, and reBEN's
metadata.parquet (pyarrow). Image folders: 8-bit RGB PNGs (Pillow) and 16-bit TIFF sequences.

The signal: each planted class brightens one band (or image channel) by a large offset, so a small CNN can learn it.
Every pixel is a deterministic function of the patch's number, so a test can recompute what a shard must hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BANDS = ("B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B8A", "B09", "B11", "B12")
BAND_SIZE = {"B01": 20, "B09": 20, "B02": 120, "B03": 120, "B04": 120, "B08": 120,
             "B05": 60, "B06": 60, "B07": 60, "B8A": 60, "B11": 60, "B12": 60}
# 43-class names planted, the 19-class index each maps to, and the band each one brightens (one band per size)
PLANTED = {
    "Coniferous forest": (9, "B08"),
    "Pastures": (4, "B11"),
    "Sea and ocean": (18, "B01"),
    "Estuaries": (18, "B01"),     # merges into Marine waters with Sea and ocean
}
DROPPED_ONLY = ["Airports"]        # no 19-class counterpart: such a patch has no 19-class label
SIGNAL = 3000


def band_pixels(patch_number: int, band: str, labels: list[str]) -> np.ndarray:
    """The uint16 pixels of one band of one patch: a base level per band, noise, and the planted offsets."""
    size = BAND_SIZE[band]
    rng = np.random.RandomState(patch_number * 100 + BANDS.index(band))
    pixels = 100 * (BANDS.index(band) + 1) + rng.randint(0, 50, (size, size))
    if any(PLANTED.get(name, (None, None))[1] == band for name in labels):
        pixels = pixels + SIGNAL
    return pixels.astype("uint16")


def write_geotiff(path: Path, pixels: np.ndarray, metres: int, ulx: int = 643200, uly: int = 5798040) -> None:
    """A single-band GeoTIFF like BigEarthNet's: pixel scale, tie point and EPSG:32629 in GeoTIFF tags."""
    import tifffile

    geokeys = (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32629)
    tifffile.imwrite(path, pixels, extratags=[
        (33550, "d", 3, (float(metres), float(metres), 0.0), False),
        (33922, "d", 6, (0.0, 0.0, 0.0, float(ulx), float(uly), 0.0), False),
        (34735, "H", len(geokeys), geokeys, False),
    ])


def write_patch(directory: Path, name: str, number: int, labels: list[str]) -> None:
    """One patch folder's 12 band files (``<name>_<band>.tif``) at their native sizes."""
    directory.mkdir(parents=True)
    for band in BANDS:
        write_geotiff(directory / f"{name}_{band}.tif", band_pixels(number, band, labels), 1200 // BAND_SIZE[band])


def random_labels(rng: np.random.RandomState) -> list[str]:
    """A non-empty random subset of the planted classes (Sea and ocean and Estuaries may come together)."""
    names = [n for n in PLANTED if rng.rand() < 0.5]
    return names or [list(PLANTED)[rng.randint(len(PLANTED))]]


def v1_name(number: int) -> str:
    """A v1 patch name (unique below 10,000); every third one has the 5-digit time some real names have, and the
    patch indices have 1 or 2 digits, not zero-padded, as in the archive."""
    time = "93020" if number % 3 == 0 else "101031"
    return f"S2{'AB'[number % 2]}_MSIL2A_20170613T{time}_{number // 100}_{number % 100}"


@dataclass
class BenV1:
    """What was written for a v1 dataset."""

    root: Path
    labels: dict[str, list[str]] = field(default_factory=dict)   # patch -> its 43-class names (all written ones)
    numbers: dict[str, int] = field(default_factory=dict)
    snow: str = ""
    cloud: str = ""
    no_label: str = ""
    snow_list: Path = Path()
    cloud_list: Path = Path()


def write_ben_v1(base: Path, count: int, seed: int = 0) -> BenV1:
    """``count`` labelled patches plus a snowy one, a cloudy one and one whose only label has no 19-class match."""
    rng = np.random.RandomState(seed)
    data = BenV1(root=base / "BigEarthNet-v1.0")
    for number in range(count + 3):
        name = v1_name(number)
        labels = random_labels(rng)
        if number == count + 2:
            labels, data.no_label = list(DROPPED_ONLY), name
        write_patch(data.root / name, name, number, labels)
        (data.root / name / f"{name}_labels_metadata.json").write_text(json.dumps({
            "labels": labels, "coordinates": {"ulx": 643200, "uly": 5798040, "lrx": 644400, "lry": 5796840},
            "projection": 'PROJCS["WGS 84 / UTM zone 29N",AUTHORITY["EPSG","32629"]]',
            "tile_source": "S2A_MSIL1C_20170613T101031_N0205_R022_T29UPU_20170613T101032.SAFE",
            "acquisition_date": "2017-06-13 10:10:31"}))
        data.labels[name], data.numbers[name] = labels, number
    data.snow, data.cloud = v1_name(count), v1_name(count + 1)
    data.snow_list, data.cloud_list = base / "patches_with_seasonal_snow.csv", base / "patches_with_cloud_and_shadow.csv"
    data.snow_list.write_text(f"{data.snow}\nS2B_MSIL2A_20170831T095029_27_76\n")   # second name is not in the folder
    data.cloud_list.write_text(f"{data.cloud}\n")
    return data


@dataclass
class BenV2:
    """What was written for a reBEN dataset."""

    root: Path
    metadata: Path
    rows: list[dict] = field(default_factory=list)  # type: ignore[type-arg]


def write_ben_v2(base: Path, count: int, seed: int = 1) -> BenV2:
    """A reBEN S2 folder (tile/patch/band files, no JSON) and its metadata.parquet with labels and split."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.RandomState(seed)
    names19 = {9: "Coniferous forest", 4: "Pastures", 18: "Marine waters"}
    data = BenV2(root=base / "BigEarthNet-S2", metadata=base / "metadata.parquet")
    splits = ["train"] * 6 + ["validation"] * 2 + ["test"] * 2
    for number in range(count):
        tile = "S2A_MSIL2A_20170613T101031_N9999_R022_T33UUP"
        patch = f"{tile}_{number // 10:02d}_{number % 10:02d}"
        labels = random_labels(rng)
        write_patch(data.root / tile / patch, patch, number, labels)
        data.rows.append({"patch_id": patch, "labels": sorted({names19[PLANTED[n][0]] for n in labels}),
                          "split": splits[number % len(splits)], "country": "Austria",
                          "s1_name": f"S1A_IW_GRDH_1SDV_20170613T165043_33UUP_{number}_0",
                          "s2v1_name": v1_name(number), "contains_seasonal_snow": False,
                          "contains_cloud_or_shadow": False, "_planted": labels, "_number": number})
    columns = [k for k in data.rows[0] if not k.startswith("_")]
    pq.write_table(pa.table({k: [r[k] for r in data.rows] for k in columns}), data.metadata)
    return data


def write_image_folder(root: Path, per_class: int, sequence: bool = False, frames: int = 3, size: int = 16) -> list[str]:
    """Two classes of ``size`` x ``size`` images: 8-bit RGB PNGs whose class brightens the red or blue channel; or,
    in sequence mode, folders of 16-bit grey TIFF frames whose class makes the later frames brighter or darker.
    Returns the class names."""
    import tifffile
    from PIL import Image

    classes = ["healthy", "polyq"] if sequence else ["cells_a", "cells_b"]
    rng = np.random.RandomState(7)
    for label, name in enumerate(classes):
        for i in range(per_class):
            if sequence:
                folder = root / name / f"mouse{i:02d}"
                folder.mkdir(parents=True)
                for t in range(frames):
                    trend = (1 if label else -1) * 400 * t
                    frame = (2000 + trend + rng.randint(0, 100, (size, size))).astype("uint16")
                    tifffile.imwrite(folder / f"frame_{t + 1}.tif", frame)   # frame_1 .. frame_N, sorted by number
            else:
                (root / name).mkdir(parents=True, exist_ok=True)
                pixels = rng.randint(0, 60, (size, size, 3))
                pixels[..., 0 if label == 0 else 2] += 150
                Image.fromarray(pixels.astype("uint8"), "RGB").save(root / name / f"img{i:03d}.png")
    return classes
