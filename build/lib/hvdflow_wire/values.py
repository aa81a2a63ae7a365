"""The checks every reader of a wire file shares, and the atomic write every writer of a JSON file shares.

A wire value is a frozen dataclass whose fields are JSON values (``int``, ``float``, ``str``, ``bool``, ``Any``,
``Optional``, ``List``, ``Dict[str, ...]``) or other wire values; :func:`to_json` and :func:`from_json` turn one
into a JSON object and back, checking every key against the field's type. A class may name a field's key in JSON
differently (``JSON_KEYS``), carry a constant key that tells it from the other records of its file (``TAG``: key
and value), keep every other key of its object in one ``Dict`` field (``REST``: that field's name), and leave out of
its object the ``Optional`` fields that are None (``ABSENT_WHEN_NONE``: their names; such a field is None where its
key is absent).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Dict, Mapping, Type, TypeVar, Union

from hvdflow_wire.replace import replaced

T = TypeVar("T")


class WireError(ValueError):
    """A file passed between processes is malformed: the message names the file (and line) and what is wrong."""


def _json_keys(cls: type) -> Dict[str, str]:
    return dict(getattr(cls, "JSON_KEYS", {}))


def to_json(value: Any) -> Any:
    """``value`` as plain JSON values: a wire value becomes an object keyed by its JSON keys."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        keys, rest, tag = _json_keys(cls), getattr(cls, "REST", None), getattr(cls, "TAG", None)
        absent = getattr(cls, "ABSENT_WHEN_NONE", ())
        data = dict(to_json(getattr(value, rest))) if rest else {}
        data.update({keys.get(f.name, f.name): to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                     if f.name != rest and not (f.name in absent and getattr(value, f.name) is None)})
        if tag:
            data[tag[0]] = tag[1]
        return data
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def check(value: object, hint: Any, where: str) -> Any:
    """``value`` checked against the type ``hint`` (wire values built from their JSON); WireError naming ``where``."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        return check(value, next(a for a in args if a is not type(None)), where)
    if origin is list:
        if not isinstance(value, list):
            raise WireError("%s is %s, expected a list" % (where, _kind(value)))
        return [check(item, args[0], "%s[%d]" % (where, i)) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise WireError("%s is %s, expected an object" % (where, _kind(value)))
        return {key: check(item, args[1], "%s[%s]" % (where, json.dumps(key))) for key, item in value.items()}
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    if not ok:
        raise WireError("%s is %s, expected %s" % (where, _kind(value), hint.__name__))
    return value


def from_json(cls: Type[T], data: object, where: str) -> T:
    """The wire value ``cls`` from its JSON object ``data``: every key there, of its type, and no other."""
    if not isinstance(data, dict):
        raise WireError("%s is %s, expected an object" % (where, _kind(data)))
    hints = typing.get_type_hints(cls)
    keys, rest, tag = _json_keys(cls), getattr(cls, "REST", None), getattr(cls, "TAG", None)
    data = dict(data)
    if tag and data.pop(tag[0], None) != tag[1]:
        raise WireError("%s: %s is not %s" % (where, tag[0], json.dumps(tag[1])))
    fields = {keys.get(f.name, f.name): f.name for f in dataclasses.fields(cls) if f.name != rest}
    for name in getattr(cls, "ABSENT_WHEN_NONE", ()):
        data.setdefault(keys.get(name, name), None)
    missing = sorted(set(fields) - set(data))
    unknown = [] if rest else sorted(set(data) - set(fields))
    if missing or unknown:
        raise WireError("%s: %s" % (where, "; ".join(
            (["missing %s" % ", ".join(missing)] if missing else []) + (["unknown %s" % ", ".join(unknown)] if unknown else []))))
    values = {name: check(data.pop(key), hints[name], "%s: %s" % (where, key)) for key, name in fields.items()}
    if rest:
        values[rest] = check(data, hints[rest], where)
    try:
        return cls(**values)
    except WireError as exc:  # the value's own check of its fields together
        raise WireError("%s: %s" % (where, exc)) from None


def parse_object(text: str, where: str) -> Dict[str, Any]:
    """The JSON object in ``text``; WireError naming ``where`` if it is not JSON or not an object."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise WireError("%s is not valid JSON (%s)" % (where, exc)) from None
    if not isinstance(data, dict):
        raise WireError("%s is %s, expected an object" % (where, _kind(data)))
    return data


def read_object(path: str) -> Dict[str, Any]:
    """The JSON object in the file ``path`` (FileNotFoundError where there is none)."""
    with open(path) as handle:
        return parse_object(handle.read(), path)


def write_object(path: str, data: Mapping[str, Any], end: str = "") -> None:
    """Write ``data`` as indented, key-sorted JSON followed by ``end`` so that a reader sees the old file or the whole
    new one (a temporary file beside ``path``, then renamed over it)."""
    with replaced(path) as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write(end)
