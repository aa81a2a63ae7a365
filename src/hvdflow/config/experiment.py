"""One experiment of the config as the trainer takes it: ranks, nodes, model, optimiser and strategy settings."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from hvdflow.config.user_code import UserModel
from hvdflow.errors import LaunchError
from hvdflow_wire.names import DISTRIBUTED, FRAMEWORKS, USER_MODEL
from hvdflow_wire.usage import DEFAULT_USAGE_SECONDS

RESUME_MODES = ("auto", "never")
STRATEGIES = ("allreduce", "neighbour")
TOPOLOGIES = ("ring", "exp2", "onepeer-exp2")
"""The neighbour strategy's graphs (``hvdflow_trainer.neighbours.TOPOLOGIES``; a test compares them)."""
POWER_OF_TWO_TOPOLOGIES = ("exp2", "onepeer-exp2")
SHARD_ORDERS = ("shuffled", "by_label")
RUN_SETTINGS = ("checkpoint_every", "keep_checkpoints", "resume", "usage_seconds")
"""Experiment keys that say how a run is kept, not what it computes: left out of the run's identity."""


def max_ranks_of(ranks: int, elastic: Optional[Mapping[str, int]]) -> int:
    """The most ranks a run of ``ranks`` grows to: its ``elastic`` section's ``max_ranks`` (default ``ranks``), or
    ``ranks`` for a fixed run (``elastic`` None). :attr:`TrainSpec.max_ranks` and its ``slots``; read alone where an
    entry's layout is checked before the entry as a whole."""
    return int(elastic.get("max_ranks", ranks)) if elastic else ranks


@dataclass(frozen=True)
class TrainSpec:
    """What one experiment trains (config ``experiments.<name>``, less the dataset and image)."""

    ranks: int
    model: Union[str, Mapping[str, Any]]
    """A built-in model's name, or the user's own (:class:`~hvdflow.config.user_code.UserModel`'s config mapping)."""
    hidden_units: int
    epochs: int
    batch_size: int
    learning_rate: float
    momentum: float
    warmup_epochs: int
    seed: int
    nodes: int = 1
    deterministic_allreduce: bool = True
    shuffle_buffer: int = 10000
    checkpoint_every: int = 1
    keep_checkpoints: int = 2
    resume: str = "auto"
    usage_seconds: float = DEFAULT_USAGE_SECONDS
    """Seconds between samples of each rank's CPU, memory and GPU use (0: none)."""
    strategy: str = "allreduce"
    topology: Optional[str] = None
    shard_order: str = "shuffled"
    elastic: Optional[Mapping[str, int]] = None
    """``{min_ranks, max_ranks}``: Horovod's elastic mode (ranks may leave and join at run time); None: a fixed count."""
    deterministic: bool = True
    """The framework's deterministic ops; False for a model with an op that has no deterministic kernel."""
    framework: str = "tensorflow"
    """``tensorflow`` (Horovod's Keras API) or ``pytorch``."""
    distributed: str = "horovod"
    """PyTorch's data parallelism: ``horovod`` (Horovod's PyTorch API) or ``ddp`` (DistributedDataParallel)."""

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise LaunchError(f"ranks must be at least 1, got {self.ranks}")
        if not 1 <= self.nodes <= self.ranks:
            raise LaunchError(f"nodes must be between 1 and ranks ({self.ranks}), got {self.nodes}")
        for key, value, allowed in (("resume", self.resume, RESUME_MODES), ("strategy", self.strategy, STRATEGIES),
                                    ("topology", self.topology or "ring", TOPOLOGIES),
                                    ("shard_order", self.shard_order, SHARD_ORDERS),
                                    ("framework", self.framework, FRAMEWORKS), ("distributed", self.distributed, DISTRIBUTED)):
            if value not in allowed:
                raise LaunchError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
        if self.strategy == "allreduce" and self.topology is not None:
            raise LaunchError(f"topology {self.topology} is for strategy neighbour; this experiment's strategy is "
                              "allreduce (leave topology out, or set strategy: neighbour)")
        if self.strategy == "neighbour":
            if self.ranks < 2:
                raise LaunchError(f"strategy neighbour needs at least 2 ranks (neighbours to average with), got "
                                  f"ranks {self.ranks}")
            if self.graph in POWER_OF_TWO_TOPOLOGIES and self.ranks & (self.ranks - 1):
                raise LaunchError(f"topology {self.graph} needs a power-of-two number of ranks, got ranks "
                                  f"{self.ranks} (ring takes any number)")

        if self.elastic is not None:
            self._check_elastic()
        self._check_framework()
        if isinstance(self.model, Mapping) and self.model.get("script"):
            if self.elastic is not None or self.strategy != "allreduce":
                raise LaunchError(f"a training script ({self.model['script']}) runs its own loop: hvdflow gives it the "
                                  "fixed-size allreduce set-up only (leave elastic and strategy out, or give model.build "
                                  "for hvdflow's loop)")

    def _check_framework(self) -> None:
        if self.distributed == "ddp" and self.framework != "pytorch":
            raise LaunchError("distributed ddp is PyTorch's DistributedDataParallel: it needs framework pytorch "
                              f"(this experiment's framework is {self.framework}; leave distributed out for Horovod)")
        if self.framework != "pytorch":
            return
        unsupported = [what for what, used in ((f"strategy {self.strategy}", self.strategy != "allreduce"),
                                              ("elastic", self.elastic is not None)) if used]
        if unsupported and self.distributed == "ddp":
            raise LaunchError(f"distributed ddp cannot run {', '.join(unsupported)}: PyTorch's DistributedDataParallel "
                              "has no elastic membership or neighbour averaging (use distributed horovod)")

    def _check_elastic(self) -> None:
        low, high = self.min_ranks, self.max_ranks
        if not 1 <= low <= self.ranks <= high:
            raise LaunchError(f"elastic needs 1 <= min_ranks <= ranks <= max_ranks, got min_ranks {low}, ranks "
                              f"{self.ranks}, max_ranks {high}")
        if self.strategy != "allreduce":
            raise LaunchError(f"elastic runs use strategy allreduce (the neighbour graph is fixed to its rank count), "
                              f"got strategy {self.strategy}")
        uneven = [n for n in range(low, high + 1) if self.global_batch % n]
        if uneven:
            raise LaunchError(f"elastic keeps the global batch (batch_size x ranks = {self.global_batch}) whatever the "
                              f"rank count, so it must divide among every count from min_ranks to max_ranks; it does "
                              f"not among {', '.join(map(str, uneven))}")

    @property
    def min_ranks(self) -> int:
        """The fewest ranks an elastic run goes on with (``ranks`` for a fixed run)."""
        return int(self.elastic["min_ranks"]) if self.elastic else self.ranks

    @property
    def max_ranks(self) -> int:
        """The most ranks an elastic run grows to (default ``ranks``)."""
        return max_ranks_of(self.ranks, self.elastic)

    @property
    def slots(self) -> int:
        """The ranks the run is given room for: ``max_ranks`` for an elastic run (its Slurm allocation, or this
        machine's one-rank slots), ``ranks`` otherwise."""
        return self.max_ranks

    @property
    def global_batch(self) -> int:
        """Samples per step over all ranks: ``batch_size`` per rank at ``ranks`` ranks."""
        return self.batch_size * self.ranks

    @property
    def graph(self) -> str:
        """The neighbour topology in effect (ring unless one is given)."""
        return self.topology or "ring"

    @classmethod
    def from_config(cls, entry: Mapping[str, Any]) -> "TrainSpec":
        """The spec of a validated ``experiments.<name>`` entry (its other keys, dataset and image, are left out)."""
        return cls(**{f.name: entry[f.name] for f in fields(cls) if f.name in entry})

    def user_model(self, where: str = "model") -> Optional[UserModel]:
        """The user's own model (its folder resolved against the working directory, the workflow's root, as a
        dataset's paths are); None for a built-in one."""
        if isinstance(self.model, str):
            return None
        return UserModel.from_config(where, self.model, Path.cwd())

    def trainer_args(self) -> list[str]:
        """The trainer's options for this experiment (the dataset and output folders are the launcher's)."""
        user = self.user_model()
        model = ["--model", str(self.model)] if user is None else ["--model", USER_MODEL, *user.trainer_args()]
        return [*model, "--hidden-units", str(self.hidden_units), "--epochs", str(self.epochs),
                "--batch-size", str(self.batch_size), "--learning-rate", repr(self.learning_rate),
                "--momentum", repr(self.momentum), "--warmup-epochs", str(self.warmup_epochs), "--seed", str(self.seed),
                "--shuffle-buffer", str(self.shuffle_buffer), "--checkpoint-every", str(self.checkpoint_every),
                "--keep-checkpoints", str(self.keep_checkpoints), "--usage-seconds", repr(self.usage_seconds),
                "--strategy", self.strategy,
                "--topology", self.graph, "--shard-order", self.shard_order] + (
                    ["--deterministic-allreduce"] if self.deterministic_allreduce else []) + (
                    ["--elastic-ranks", str(self.ranks)] if self.elastic else []) + (
                    [] if self.deterministic else ["--no-op-determinism"]) + (
                    ["--framework", self.framework, "--distributed", self.distributed]
                    if self.framework != "tensorflow" else [])
