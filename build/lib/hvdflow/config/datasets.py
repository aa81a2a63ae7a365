"""Dataset entries of the config (``datasets.<name>``): checks at parse time, resolved paths, what the container
must see. The adapters themselves run in the container (:mod:`hvdflow_trainer.sources`); a ``source`` that is a
mapping names the user's own reader (:mod:`hvdflow_trainer.sources.user_reader`), whose folder is bound like the
data's and whose files are the listing's inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from hvdflow.config.user_code import check_module, code_files, code_folder, tree_sha256
from hvdflow.errors import ConfigError

MULTI_LABEL_SOURCES = ("bigearthnet-v1", "bigearthnet-v2")
USER_READER = "user-reader"
"""What a user's own reader is called where a source has a name (the image check, messages)."""
REQUIRED = {"bigearthnet-v1": ("path",), "bigearthnet-v2": ("path", "metadata"), "image-folder": ("path",),
            "sklearn-digits": (), USER_READER: ("path",)}
FILE_KEYS = ("metadata", "seasonal_snow_list", "cloud_shadow_list")
SPLIT_KEYS = ("train", "validation", "test")


def source_name(entry: Mapping[str, Any]) -> str:
    """The entry's source by name: the built-in one, or :data:`USER_READER`."""
    return entry["source"] if isinstance(entry["source"], str) else USER_READER


def _paths(entry: Mapping[str, Any]) -> dict[str, str]:
    """Every path the entry names, by its config key (``split_lists.train``, ``source.code`` and so on)."""
    found = {key: str(entry[key]) for key in ("path", *FILE_KEYS) if entry.get(key)}
    found.update({f"split_lists.{k}": str(v) for k, v in (entry.get("split_lists") or {}).items()})
    if source_name(entry) == USER_READER:
        found["source.code"] = str(entry["source"]["code"])
    return found


def check_dataset(name: str, entry: Mapping[str, Any]) -> None:
    """ConfigError naming ``datasets.<name>.<key>`` for a missing key, a missing path or a combination that cannot
    work; the schema has already checked types and names."""
    where = f"datasets.{name}"
    source = source_name(entry)
    if source == USER_READER:
        code = code_folder(f"{where}.source.code", str(entry["source"]["code"]), Path.cwd())
        for key in ("read", "list"):
            if entry["source"].get(key):
                check_module(f"{where}.source.{key}", code, str(entry["source"][key]))
    for key in REQUIRED[source]:
        if not entry.get(key):
            raise ConfigError(f"{where}.{key} is required for source {source}")
    if source == "bigearthnet-v2" and entry.get("nomenclature", 19) != 19:
        raise ConfigError(f"{where}.nomenclature: BigEarthNet v2 labels use the 19-class nomenclature only")
    if source != "bigearthnet-v1":
        for key in ("seasonal_snow_list", "cloud_shadow_list", "split_lists"):
            if entry.get(key):
                raise ConfigError(f"{where}.{key} applies to bigearthnet-v1 only (v2's metadata table has them)")
    fractions = float(entry.get("validation_fraction", 0)) + float(entry.get("test_fraction", 0))
    if fractions >= 1:
        raise ConfigError(f"{where}: validation_fraction {entry.get('validation_fraction', 0)} and test_fraction "
                          f"{entry.get('test_fraction', 0)} leave nothing to train on (they must sum below 1)")
    if entry.get("sequence") and source != "image-folder":
        raise ConfigError(f"{where}.sequence applies to image-folder only")
    split_lists = entry.get("split_lists") or {}
    if split_lists and sorted(split_lists) != sorted(SPLIT_KEYS):
        raise ConfigError(f"{where}.split_lists needs exactly the keys {', '.join(SPLIT_KEYS)}; got {sorted(split_lists)}")
    for key, value in _paths(entry).items():
        path = Path(value)
        if not path.exists():
            raise ConfigError(f"{where}.{key}: {path.resolve()} does not exist")
        if key == "path" and not path.is_dir():
            raise ConfigError(f"{where}.{key}: {path.resolve()} is not a folder")


def resolved_spec(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The entry with its name and every path made absolute, as the container's preparation reads it."""
    spec = {**entry, "name": name}
    for key in ("path", *FILE_KEYS):
        if entry.get(key):
            spec[key] = str(Path(entry[key]).resolve())
    if entry.get("split_lists"):
        spec["split_lists"] = {k: str(Path(v).resolve()) for k, v in entry["split_lists"].items()}
    if source_name(entry) == USER_READER:
        code = Path(entry["source"]["code"]).resolve()
        spec["source"] = {**entry["source"], "code": str(code), "tree_sha256": tree_sha256(code_files(code))}
    return spec


def input_paths(entry: Mapping[str, Any]) -> list[str]:
    """The files and folders whose change means listing again (Snakemake inputs of the listing job): for a user's
    reader the files of its folder, each, so that an edit lists the dataset again."""
    paths = _paths(entry)
    code = paths.pop("source.code", None)
    files = [str(Path(code) / name) for name in code_files(Path(code))] if code is not None else []
    return sorted([*paths.values(), *files])


def bind_paths(spec: Mapping[str, Any]) -> list[Path]:
    """Host folders the container must see to read a resolved spec's data: the data folder and the lists' folders,
    without those inside another one."""
    folders = {p if p.is_dir() else p.parent for p in (Path(v) for v in _paths(spec).values())}
    return sorted(f for f in folders if not any(other in f.parents for other in folders))


def task_of(entry: Mapping[str, Any]) -> str:
    """``multi-label`` or ``single-label``: what the dataset's labels are."""
    if source_name(entry) == USER_READER:
        return str(entry["source"].get("task", "single-label"))
    return "multi-label" if entry["source"] in MULTI_LABEL_SOURCES else "single-label"
