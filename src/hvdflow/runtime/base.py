"""The one door to the runtimes: the factory that builds the runtime a profile's ``runtime:`` section asks for
(:func:`make_runtime`, :func:`runtime_for`), the store its images come from (:func:`image_store`), the section
itself checked by its kind's schema (:func:`runtime_settings`) and that schema for the profile's (:func:`section_schema`).

A new runtime is its folder beside ``udocker/`` (its ``KIND``: settings, builder, image store, engine record) and
its line in :mod:`hvdflow.runtime.registry`; nothing here changes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.errors import ConfigError
from hvdflow.files.yamlfile import check_keys, expanded, expect
from hvdflow.findings import Finding
from hvdflow.runtime.kind import Runtime, RuntimeKind
from hvdflow.runtime.record import ContainerRecord, container_in_mode
from hvdflow.runtime.registry import KINDS
from hvdflow.runtime.settings import COMMON_SCHEMA, DEFAULT_UDOCKER_DIR, RuntimeSettings, allow_root_from_env
from hvdflow.runtime.store import ImageStore
from hvdflow.runtime.udocker.runtime import expose_gpus as udocker_expose_gpus
from hvdflow_wire.task import NvidiaSetup


def kind_of(kind: str, where: str = "runtime") -> RuntimeKind:
    """The runtime named ``kind``; ConfigError naming ``where`` it was said and the known ones if none."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ConfigError(f"{where}: {kind!r} is not one of {', '.join(KINDS)}") from None


def image_store(kind: str, location: Path, allow_root: Optional[bool] = None) -> ImageStore:
    """The image store of runtime ``kind`` at ``location`` (may it run as root: ``HVDFLOW_ALLOW_ROOT`` unless said);
    ConfigError naming the known runtimes for an unknown kind."""
    return kind_of(kind).store(location, allow_root_from_env() if allow_root is None else allow_root)


def store_of(settings: RuntimeSettings) -> ImageStore:
    """The image store of the runtime ``settings`` names, at its ``udocker_dir``."""
    return image_store(settings.kind, settings.udocker_dir, settings.allow_root)


def setup_log(settings: RuntimeSettings, image: str) -> Optional[Path]:
    """The log of the runtime's own set-up for ``image`` (:attr:`RuntimeKind.setup_log`), or None."""
    return kind_of(settings.kind).setup_log(settings, image)


def make_runtime(settings: RuntimeSettings, record: ContainerRecord, catalog: Optional[Path] = None) -> Runtime:
    """The runtime ``settings`` asks for, running the image of ``record`` (the pull's container record); the
    catalogue ``catalog`` for a kind that builds from the image's recipe (native)."""
    return kind_of(settings.kind).build(settings, record, catalog)


def runtime_for(settings: RuntimeSettings, image_record: Path, catalog: Path, execmode: Optional[str] = None) -> Runtime:
    """The runtime ``settings`` asks for, with the image the record (a file the pull wrote) names; with ``execmode``,
    udocker's container of that mode (:func:`~hvdflow.runtime.udocker.pull.container_in_mode`)."""
    record = ContainerRecord.read(image_record)
    if execmode is not None:
        record = container_in_mode(record, execmode)
    return make_runtime(settings, record, catalog)


def as_kind(settings: RuntimeSettings, kind: str, launcher: str) -> RuntimeSettings:
    """``settings`` for the runtime ``kind`` instead, with that kind's defaults and the same image store (the
    benchmark measures every runtime with one profile); ``settings`` itself where it is of that kind."""
    if settings.kind == kind:
        return settings
    return replace(settings, kind=kind, options=kind_of(kind).options(f"runtime {kind}", {}, launcher))


def section_schema() -> dict[str, Any]:
    """The JSON schema of the profile's ``runtime:`` section: ``kind``, the keys every kind takes, and each kind's
    own (its description starting with the kinds that take it)."""
    kinds = "; ".join(f"{kind.name} ({kind.summary})" for kind in KINDS.values())
    properties: dict[str, Any] = {"kind": {"enum": list(KINDS), "description": f"Which runtime runs the ranks: {kinds}."}}
    properties.update(COMMON_SCHEMA)
    for kind in KINDS.values():
        for key, schema in kind.schema.items():
            if key in properties:
                raise AssertionError(f"runtime key {key} of {kind.name} is another's too")
            properties[key] = {**schema, "description": f"Kind {kind.name} only. {schema['description']}"}
    return {"type": "object", "additionalProperties": False, "required": ["kind"], "properties": properties,
            "description": "The runtime, its kind and its own keys (those of another kind are refused)."}


FLAT_KEYS = {"execmode": "execmode", "proot": "proot", "udocker_dir": "udocker_dir", "native_venv_dir": "venv_dir"}
"""The runtime's keys that profiles held at their top level before the ``runtime:`` section (and record_version 1
run records still do) → their key in the section."""


def section_from_flat(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The ``runtime:`` section that a profile of the flat layout means: its ``runtime`` as the kind (udocker where
    it names none) and those of its top-level runtime keys that kind takes, unset ones left out."""
    kind = profile["runtime"] if isinstance(profile.get("runtime"), str) else "udocker"
    takes = {*COMMON_SCHEMA, *(KINDS[kind].schema if kind in KINDS else {})}
    return {"kind": kind, **{new: profile[old] for old, new in FLAT_KEYS.items()
                             if new in takes and profile.get(old) is not None}}


def runtime_settings(where: str, section: Any, launcher: str) -> RuntimeSettings:
    """The profile's ``runtime:`` section at ``where``, checked by its kind's schema and typed; ConfigError naming
    the key (a key of another kind: which kind takes it)."""
    expect(where, section, dict)
    if "kind" not in section:
        raise ConfigError(f"{where}: missing required key kind ({', '.join(KINDS)})")
    kind = kind_of(expanded(f"{where}.kind", section["kind"]), f"{where}.kind")
    for key in section:
        owner = next((k.name for k in KINDS.values() if key in k.schema and k is not kind), None)
        if owner is not None and key not in kind.schema:
            raise ConfigError(f"{where}.{key}: a key of runtime kind {owner}, not of {kind.name}")
    check_keys(where, section, ["kind"], [*COMMON_SCHEMA, *kind.schema])
    udocker_dir = Path(expanded(f"{where}.udocker_dir", section.get("udocker_dir", DEFAULT_UDOCKER_DIR)))
    return RuntimeSettings(kind.name, udocker_dir, kind.options(where, {k: section[k] for k in kind.schema if k in section},
                                                                 launcher))


def host_checks(settings: RuntimeSettings) -> list[Finding]:
    """The runtime's own checks of this host for ``hvdflow doctor`` (:attr:`RuntimeKind.host_checks`)."""
    return kind_of(settings.kind).host_checks(settings)


def recorded_engine(settings: RuntimeSettings, image: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """What the run record says of the engine of the runtime ``settings`` names, for the image record ``image``."""
    return kind_of(settings.kind).recorded_engine(settings, image)


def expose_gpus(setup: NvidiaSetup) -> str:
    """Do on this node what a runtime's :meth:`Runtime.gpu_setup` asked for; a note for the rank's log. Only the
    udocker runtime asks for anything (``udocker setup --nvidia`` of its container)."""
    return udocker_expose_gpus(setup)
