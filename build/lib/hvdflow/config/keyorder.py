"""One order for the config's mappings, so that rules' params compare equal however the YAML lists their keys."""

from __future__ import annotations

from typing import Any


def key_sorted(value: Any) -> Any:
    """``value`` with the keys of every mapping in it sorted (lists keep their order).

    Snakemake compares a rule's params with those of the run that made its outputs as they are written: the same
    settings in another order would re-run the rule (a dataset prepared again for nothing).
    """
    if isinstance(value, dict):
        return {key: key_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [key_sorted(item) for item in value]
    return value
