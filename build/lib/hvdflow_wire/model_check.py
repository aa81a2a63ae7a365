"""What the check of a user's model found (``model-check.json`` in the experiment's results): written by the
trainer's ``check_model`` step in the image before any training job, read on the host by the rule that ran it
(:func:`hvdflow.pipeline.stages.check_user_model`), which says its summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from .values import from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class ModelCheck:
    """A model built by the user's ``build`` function on the dataset's shapes and trained one step (its parameters,
    shapes, task and the random ops whose position a resume cannot restore), or a training script compiled
    (``script``; the shapes None: it builds its model itself)."""

    summary: str
    build: Optional[str]
    script: Optional[str]
    parameters: Optional[int]
    input_shape: Optional[List[int]]
    output_shape: Optional[List[Optional[int]]]
    num_classes: Optional[int]
    multi_label: Optional[bool]
    unresumable_random_ops: List[str]

    @classmethod
    def built(cls, build: str, parameters: int, input_shape: Sequence[int], output_shape: Sequence[Optional[int]],
              num_classes: int, multi_label: bool, unresumable_random_ops: Sequence[str] = ()) -> "ModelCheck":
        """A built model's check, its summary said from its parameters and output."""
        return cls("builds a model of %d parameters, output %s" % (parameters, list(output_shape)), build, None,
                   int(parameters), [int(n) for n in input_shape], [None if n is None else int(n) for n in output_shape],
                   int(num_classes), bool(multi_label), list(unresumable_random_ops))

    @classmethod
    def compiled(cls, script: str, lines: int) -> "ModelCheck":
        """A training script's check: it compiles, in ``lines`` lines."""
        return cls("compiles (%d lines); it runs its own loop" % lines, None, script, None, None, None, None, None, [])

    def write(self, path: str) -> None:
        """Write ``model-check.json`` atomically."""
        write_object(str(path), to_json(self))

    @classmethod
    def read(cls, path: str) -> "ModelCheck":
        """The check in ``path``; WireError naming the file and what is wrong."""
        return from_json(cls, read_object(str(path)), str(path))
