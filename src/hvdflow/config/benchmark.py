"""The benchmark the config asks for (``benchmark:``), checked against the profile, and the measurements it makes.

One measurement is one launch of Horovod ranks (``hvdflow_trainer.benchmark``): a model's training throughput, or the
allreduce sweep with the raw TCP bandwidth, for one rank count over one node count in one runtime, once per
repetition. Every key is checked here, naming it, before any job starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from hvdflow.config.user_code import UserModel
from hvdflow.errors import ConfigError
from hvdflow.runtime.registry import KINDS
from hvdflow_wire.names import BUILT_IN_MODELS, USER_MODEL

MODELS = BUILT_IN_MODELS
"""The models the trainer builds by name (``hvdflow_wire.names``)."""
ALLREDUCE = "allreduce"
FRAMEWORKS = {"tensorflow": "", "pytorch-horovod": "torch-", "pytorch-ddp": "ddp-"}
"""The frameworks the benchmark compares, and the prefix of their measurements' kinds: TensorFlow/Keras with Horovod
(``mlp``, ``allreduce``), PyTorch with Horovod (``torch-mlp``, ``torch-allreduce``), PyTorch's
DistributedDataParallel (``ddp-mlp``, ``ddp-allreduce``)."""
USER_MODEL_FRAMEWORKS = ("tensorflow", "pytorch")
"""What a user's benchmarked model may be written in (``benchmark.user_models.<name>.framework``)."""
UDOCKER_MODES = {"udocker": None, "udocker-P1": "P1", "udocker-R1": "R1"}
"""The benchmark's udocker runtimes and the mode each runs: ``udocker`` the profile's (under ``auto``, each node's
choice), ``udocker-P1`` and ``udocker-R1`` that mode's container, so that one run sets the modes side by side."""
BENCHMARK_RUNTIMES = (*UDOCKER_MODES, *(r for r in KINDS if r != "udocker"))
NAME_PATTERN = (r"(?P<kind>[a-z0-9-]+)-r(?P<ranks>\d+)-n(?P<nodes>\d+)-"
                rf"(?P<runtime>{'|'.join(sorted(BENCHMARK_RUNTIMES, key=len, reverse=True))})-(?P<rep>\d+)")
"""How a measurement's name reads back (:attr:`Measurement.name`)."""


def runtime_kind(runtime: str) -> tuple[str, Optional[str]]:
    """The profile's runtime a benchmark runtime is (``udocker``, ``native``), and the udocker mode it asks for
    (None: the profile's)."""
    if runtime in UDOCKER_MODES:
        return "udocker", UDOCKER_MODES[runtime]
    return runtime, None


def framework_of(kind: str) -> tuple[str, str]:
    """``(framework, model or allreduce)`` of a measurement's ``kind`` (its prefix, :data:`FRAMEWORKS`)."""
    for framework, prefix in FRAMEWORKS.items():
        if prefix and kind.startswith(prefix):
            return framework, kind[len(prefix):]
    return "tensorflow", kind


@dataclass(frozen=True)
class Measurement:
    """One launch: ``kind`` (a model, or ``allreduce``) with ``ranks`` ranks over ``nodes`` nodes in ``runtime``,
    repetition ``rep`` (from 0)."""

    kind: str
    ranks: int
    nodes: int
    runtime: str
    rep: int

    @property
    def name(self) -> str:
        """The measurement's file stem: ``<kind>-r<ranks>-n<nodes>-<runtime>-<rep>``."""
        return f"{self.kind}-r{self.ranks}-n{self.nodes}-{self.runtime}-{self.rep}"


@dataclass(frozen=True)
class BenchmarkedUserModel:
    """A user's own model the benchmark measures (``benchmark.user_models.<name>``): the model, and the shape, classes
    and task of the synthetic data it is timed on."""

    model: UserModel
    input_shape: tuple[int, int, int]
    num_classes: int
    multi_label: bool
    framework: str = "tensorflow"
    """What the model is written in: ``tensorflow`` (a Keras model, measured by TensorFlow with Horovod) or
    ``pytorch`` (a torch module, measured by the PyTorch frameworks)."""

    def program_args(self) -> list[str]:
        """The benchmark program's options that name the model and its data."""
        return ["--kind", USER_MODEL, *self.model.trainer_args(), "--input-shape", *map(str, self.input_shape),
                "--num-classes", str(self.num_classes)] + (["--multi-label"] if self.multi_label else [])


@dataclass(frozen=True)
class BenchmarkSpec:
    """The validated ``benchmark:`` section."""

    image: str
    models: tuple[str, ...]
    ranks: tuple[int, ...]
    nodes: tuple[int, ...]
    runtimes: tuple[str, ...]
    repetitions: int
    batch_size: int
    hidden_units: int
    warmup_steps: int
    steps: int
    min_seconds: int
    """The shortest timed window: where ``steps`` took less, the ranks time a longer pass."""
    allreduce: bool
    allreduce_sizes_kib: tuple[int, ...]
    user_models: Mapping[str, BenchmarkedUserModel] = field(default_factory=dict)
    frameworks: tuple[str, ...] = ("tensorflow",)
    torch_image: str = ""
    """The catalogue's image the PyTorch measurements run in (``image`` runs TensorFlow's)."""

    def framework_kinds(self, framework: str) -> list[str]:
        """The measurements' kinds of ``framework``: its prefix on the built-in models, on the user's models written
        in its family (Keras models for TensorFlow, torch modules for both PyTorch frameworks) and on the allreduce
        sweep."""
        family = "tensorflow" if framework == "tensorflow" else "pytorch"
        models = [m for m in self.models if m in MODELS or self.user_models[m].framework == family]
        return [FRAMEWORKS[framework] + kind for kind in models + ([ALLREDUCE] if self.allreduce else [])]

    def kinds(self) -> list[str]:
        """Every kind the benchmark measures, framework by framework."""
        return [kind for framework in self.frameworks for kind in self.framework_kinds(framework)]

    def image_of(self, kind: str) -> str:
        """The catalogue's image ``kind`` runs in."""
        return self.image if framework_of(kind)[0] == "tensorflow" else self.torch_image

    def measurements(self) -> list[Measurement]:
        """Every launch, listed repetition by repetition with the runtimes side by side within one (Snakemake picks
        the order they run in; on one machine one at a time); the allreduce sweep needs at least 2 ranks."""
        return [Measurement(kind, ranks, nodes, runtime, rep)
                for rep in range(self.repetitions) for kind in self.kinds() for ranks in self.ranks
                for nodes in self.nodes for runtime in self.runtimes_of(kind)
                if nodes <= ranks and not (framework_of(kind)[1] == ALLREDUCE and ranks < 2)]

    def repetition(self, rep: int) -> list[Measurement]:
        """The measurements of repetition ``rep`` (none outside ``0 .. repetitions - 1``). On one machine a repetition
        starts once the one before it has ended, so the runtimes it sets side by side run minutes apart at most and
        :func:`hvdflow.pipeline.benchmark.goals` can pair them; a load that comes and goes on a shared machine then
        spreads over the repetitions instead of falling on one runtime."""
        return [m for m in self.measurements() if m.rep == rep]

    def runtimes_of(self, kind: str) -> tuple[str, ...]:
        """The runtimes ``kind`` is measured in: PyTorch's in udocker only (the native runtime is a venv of the
        host's Python with the image's pinned wheels, and PyTorch's image is Debian 13's Python and torch)."""
        if framework_of(kind)[0] == "tensorflow":
            return self.runtimes
        return tuple(r for r in self.runtimes if runtime_kind(r)[0] == "udocker")

    def layouts(self) -> list[tuple[int, int]]:
        """Every (ranks, nodes) the measurements use: each must fit the profile's cluster
        (:func:`hvdflow.config.layout.check_layout`, which the workflow runs on them before any job)."""
        return [(ranks, nodes) for ranks in self.ranks for nodes in self.nodes if nodes <= ranks]

    def program_args(self, kind: str) -> list[str]:
        """The benchmark program's options for ``kind`` (the launcher adds ``--out``, ``--launched``, ``--threads``)."""
        framework, kind = framework_of(kind)
        torch = [] if framework == "tensorflow" else ["--framework", "pytorch", "--distributed", framework.split("-")[1]]
        if kind == ALLREDUCE:
            return ["--kind", kind, *torch, "--sizes-kib", *(str(s) for s in self.allreduce_sizes_kib)]
        model = self.user_models[kind].program_args() if kind in self.user_models else ["--kind", kind]
        return [*model, *torch, "--batch-size", str(self.batch_size), "--hidden-units", str(self.hidden_units),
                "--warmup-steps", str(self.warmup_steps), "--steps", str(self.steps),
                "--min-seconds", str(self.min_seconds)]

    def read_paths(self, kind: str) -> list[Path]:
        """The host folders ``kind``'s ranks read: a user's model's code folder (under any framework's prefix)."""
        model = framework_of(kind)[1]
        return [self.user_models[model].model.code] if model in self.user_models else []


def _ints(key: str, value: Any, minimum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and not isinstance(v, bool)
                                                             for v in value):
        raise ConfigError(f"benchmark.{key}: give a non-empty list of integers, not {value!r}")
    low = [v for v in value if v < minimum]
    if low:
        raise ConfigError(f"benchmark.{key}: {low[0]} is less than {minimum}")
    return tuple(sorted(set(value)))


def _int(key: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"benchmark.{key}: {value!r} must be an integer of at least {minimum}")
    return value


def _names(key: str, value: Any, known: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"benchmark.{key}: give a non-empty list of {', '.join(known)}, not {value!r}")
    unknown = [v for v in value if v not in known]
    if unknown:
        raise ConfigError(f"benchmark.{key}: {unknown[0]!r} is not one of {', '.join(known)}")
    return tuple(dict.fromkeys(value))


def _user_models(section: Mapping[str, Any]) -> dict[str, BenchmarkedUserModel]:
    """``benchmark.user_models``, each checked (a name a measurement's file can carry, none of hvdflow's, the
    folder and module there: :class:`UserModel`)."""
    found = {}
    for name, entry in (section.get("user_models") or {}).items():
        where = f"benchmark.user_models.{name}"
        prefixes = tuple(p for p in FRAMEWORKS.values() if p)
        if (not re.fullmatch(r"[a-z0-9][a-z0-9-]*", str(name)) or name in (*MODELS, ALLREDUCE, USER_MODEL)
                or str(name).startswith(prefixes)):
            raise ConfigError(f"{where}: name it in lower-case letters, digits and '-', other than "
                              f"{', '.join((*MODELS, ALLREDUCE, USER_MODEL))} and not starting with "
                              f"{' or '.join(prefixes)} (it names the measurement's files)")
        model = UserModel.from_config(where, {key: entry[key] for key in ("code", "build", "params") if key in entry},
                                      Path.cwd())
        shape = tuple(int(n) for n in entry["input_shape"])
        framework = str(entry.get("framework", "tensorflow"))
        if framework not in USER_MODEL_FRAMEWORKS:
            raise ConfigError(f"{where}.framework: {framework!r} is not one of {', '.join(USER_MODEL_FRAMEWORKS)}")
        found[str(name)] = BenchmarkedUserModel(model, shape, int(entry["num_classes"]),  # type: ignore[arg-type]
                                                bool(entry.get("multi_label", False)), framework)
    return found


def benchmark_spec(section: Mapping[str, Any]) -> BenchmarkSpec:
    """The config's ``benchmark:`` section, checked; ConfigError naming the key at fault."""
    user_models = _user_models(section)
    spec = BenchmarkSpec(
        image=str(section.get("image", "")),
        models=_names("models", section.get("models"), MODELS + tuple(user_models)),
        ranks=_ints("ranks", section.get("ranks"), 1),
        nodes=_ints("nodes", section.get("nodes", [1]), 1),
        runtimes=_names("runtimes", section.get("runtimes", ["udocker"]), BENCHMARK_RUNTIMES),
        repetitions=_int("repetitions", section.get("repetitions", 3), 1),
        batch_size=_int("batch_size", section.get("batch_size", 32), 1),
        hidden_units=_int("hidden_units", section.get("hidden_units", 64), 1),
        warmup_steps=_int("warmup_steps", section.get("warmup_steps", 5), 1),
        steps=_int("steps", section.get("steps", 30), 1),
        min_seconds=_int("min_seconds", section.get("min_seconds", 5), 0),
        allreduce=bool(section.get("allreduce", True)),
        allreduce_sizes_kib=_ints("allreduce_sizes_kib", section.get("allreduce_sizes_kib", [1, 64, 1024, 16384, 65536]),
                                  1),
        user_models=user_models,
        frameworks=_names("frameworks", section.get("frameworks", ["tensorflow"]), tuple(FRAMEWORKS)),
        torch_image=str(section.get("torch_image", "")),
    )
    for name in spec.models:
        if name in user_models and not any(kind.endswith(name) for kind in spec.kinds()):
            measured_by = "tensorflow" if user_models[name].framework == "tensorflow" else "pytorch-horovod or pytorch-ddp"
            raise ConfigError(f"benchmark.models: {name} is a {user_models[name].framework} model and benchmark.frameworks "
                              f"({', '.join(spec.frameworks)}) measure none of that: add {measured_by}")
    if spec.torch_image == "" and spec.frameworks != ("tensorflow",):
        raise ConfigError(f"benchmark.torch_image: frameworks {', '.join(f for f in spec.frameworks if f != 'tensorflow')} "
                          "run in a catalogue image that holds torch: name it (hvdflow-torch-cpu)")
    if not spec.image:
        raise ConfigError("benchmark.image: name the catalogue's image the benchmark runs in")
    if min(spec.nodes) > max(spec.ranks):
        raise ConfigError(f"benchmark.nodes: every node count ({', '.join(map(str, spec.nodes))}) exceeds every rank "
                          f"count ({', '.join(map(str, spec.ranks))})")
    if spec.allreduce and max(spec.ranks) < 2:
        raise ConfigError("benchmark.allreduce: the allreduce sweep needs a rank count of at least 2 in "
                          "benchmark.ranks (or allreduce: false)")
    return spec
