"""The references of the config and of a profile's ``hvdflow.yaml``, rendered from their JSON schemas: one source
for the keys users may write.

``docs/reference/config.md`` and ``docs/reference/profile.md`` are this module's output (``PYTHONPATH=src python -m
hvdflow.config.reference config|profile``, from the checkout); ``tests/test_docs.py`` fails when a page and its
schema differ, so a key added to a schema appears in the reference. Each key is one row: its path (``<name>`` for a
key of the user's choosing, ``[]`` for a list's items), what it takes (type, choices, bounds), its default and the
schema's description.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from hvdflow.config import profile_schema

SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"
"""The config's schema in this checkout."""
DEFINED = {"module_function": "`module:function`"}
"""What a value of one of the schema's ``$defs`` takes, in words (other definitions are described by their type)."""


def _resolve(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A node with its local ``$ref`` merged in (the node's own keys win)."""
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = schema
    for part in ref.lstrip("#/").split("/"):
        target = target[part]
    return {**_resolve(target, schema), **{k: v for k, v in node.items() if k != "$ref"}}


def _alternatives(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The forms a value may take: a ``oneOf``'s typed branches, an ``if``/``then``/``else``'s two, or the node."""
    if "oneOf" in node and all("type" in alt or "enum" in alt for alt in node["oneOf"]):
        return list(node["oneOf"])
    if "if" in node and "then" in node and "else" in node:
        return [{**node["if"], **node["then"]}, node["else"]]
    return [node]


def _takes(node: dict[str, Any]) -> str:
    """What a value takes, in words: its type, its choices, its bounds or pattern."""
    words = []
    for alt in _alternatives(node):
        if "enum" in alt:
            words.append("one of " + ", ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in alt["enum"]))
            continue
        kind = alt.get("type", "")
        kind = " or ".join(kind) if isinstance(kind, list) else kind
        if kind == "array" and isinstance(alt.get("items"), dict):
            items = alt["items"]
            kind = f"list of {_takes(items) if 'enum' in items or 'type' in items else 'items'}"
            if "minItems" in alt:
                kind += f" (at least {alt['minItems']})"
        if kind == "object" and "properties" in alt:
            kind = "mapping (keys below)"
        if "minimum" in alt and "maximum" in alt:
            bounds = [f"{alt['minimum']} to {alt['maximum']}"]
        else:
            bounds = [f"{word} {alt[key]}" for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"),
                                                             ("maximum", "≤"), ("exclusiveMaximum", "<")) if key in alt]
        if "pattern" in alt:
            bounds.append(f"matching `{alt['pattern']}`")
        words.append(" ".join([kind or "any", *bounds]).strip())
    return "; or ".join(words)


def rows(schema: dict[str, Any]) -> Iterator[tuple[str, str, str, str]]:
    """Every key of the schema, depth first in the schema's order: (path, what it takes, default, description)."""

    def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, str, str, str]]:
        named = str(node.get("$ref", "")).rpartition("/")[2]
        node = _resolve(node, schema)
        if path:
            default = json.dumps(node["default"]) if "default" in node else ""
            takes = DEFINED.get(named) or _takes(node)
            yield path, takes, default, " ".join(str(node.get("description", "")).split())
        for alt in _alternatives(node):
            alt = _resolve(alt, schema)
            for key, child in alt.get("properties", {}).items():
                yield from walk(child, f"{path}.{key}" if path else key)
            extra = alt.get("additionalProperties")
            if isinstance(extra, dict):
                yield from walk(extra, f"{path}.<name>")
            items = alt.get("items")
            if isinstance(items, dict) and "properties" in items:
                for key, child in items["properties"].items():
                    yield from walk(child, f"{path}[].{key}")

    yield from walk(schema, "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


@dataclass(frozen=True)
class Reference:
    """One reference page: its schema, title and lead, and its sections (a top-level key and its lead; the empty
    name holds the top-level keys no other section takes)."""

    schema: Callable[[], dict[str, Any]]
    title: str
    lead: str
    sections: dict[str, str]

    def render(self, schema: dict[str, Any] | None = None) -> str:
        """The page (Markdown), for ``schema`` (default: the reference's own)."""
        lines = [f"# {self.title}", "", self.lead, ""]
        every = list(rows(self.schema() if schema is None else schema))
        for section, lead in self.sections.items():
            mine = [r for r in every
                    if (r[0].split(".")[0] == section if section else r[0].split(".")[0] not in self.sections)]
            if not mine:
                continue
            lines += [f"## `{section}`" if section else "## Top level", "", lead, "",
                      "| key | takes | default | meaning |", "| --- | --- | --- | --- |"]
            lines += [f"| `{path}` | {_cell(takes)} | {_cell(f'`{default}`' if default else '')} | {_cell(text)} |"
                      for path, takes, default, text in mine]
            lines.append("")
        return "\n".join(lines)


REFERENCES = {
    "config": Reference(
        lambda: yaml.safe_load(SCHEMA.read_text()), "Configuration reference",
        "Every key of `config/config.yaml`, generated from `workflow/schemas/config.schema.yaml` (the schema the\n"
        "pipeline checks the config against) by `PYTHONPATH=src python -m hvdflow.config.reference config`; do not\n"
        "edit this page by hand. `<name>` is a name of yours; `[]` stands for each item of a list.\n"
        "`config/README.md` explains the config with examples.",
        {"experiments": "What to train: one entry per experiment, by a name of yours.",
         "datasets": "The data: one entry per dataset, by a name of yours, named by experiments' `dataset`.",
         "benchmark": "The benchmark target (`snakemake benchmark`).",
         "": "Where the image catalogue, the lock and the profile's settings are."}),
    "profile": Reference(
        lambda: profile_schema.SCHEMA, "Profile reference (`hvdflow.yaml`)",
        "Every key of a cluster profile's `hvdflow.yaml`, generated from its schema\n"
        "(`src/hvdflow/config/profile_schema.py`, whose keys are the only ones the profile accepts) by\n"
        "`PYTHONPATH=src python -m hvdflow.config.reference profile`; do not edit this page by hand. Values may use\n"
        "`~`, `$VARIABLE` and `${VARIABLE:-default}`; a variable that is not set and has no default is an error.\n"
        "Snakemake's `config.yaml` beside it and the shipped profiles: `profiles/README.md`.",
        {"": "Where and how hvdflow runs on the cluster.",
         "runtime": "What runs the ranks: the runtime's `kind` and its own keys (each runtime's folder under\n"
                    "`src/hvdflow/runtime/` declares them; a key of another kind is refused by name).",
         "slurm": "The Slurm side, with `scheduler: slurm`."}),
}
"""The reference pages, by the name the command line takes."""


def main(argv: list[str] | None = None) -> None:
    """Print the reference page named on the command line (config or profile)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in REFERENCES:
        sys.exit(f"usage: python -m hvdflow.config.reference {{{','.join(REFERENCES)}}}")
    sys.stdout.write(REFERENCES[args[0]].render())


if __name__ == "__main__":
    main()
