"""The trainer's command lines, each read once into a typed value: :class:`TrainOptions` (``train``, a rank of a
training), :class:`BenchmarkOptions` (``benchmark``), :class:`CheckModelOptions` (``check_model``),
:class:`EvaluateOptions` (``evaluate``) and :class:`ElasticDriverOptions` (``elastic_driver``).

Each value is a frozen dataclass whose fields are the options' destinations; ``parse`` builds its parser, reads the
command line and makes the value from every option the parser has (a parser option without its field, or a field
without its option, fails at once; tests/test_trainer_code.py parses every entry point's command line). The host writes these
command lines (:mod:`hvdflow.config.experiment`, :mod:`hvdflow.config.benchmark`, :mod:`hvdflow.launch.faults`).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import List, Optional, Type, TypeVar

from hvdflow_wire.names import USER_MODEL
from hvdflow_wire.usage import DEFAULT_USAGE_SECONDS

from .frameworks import DEFAULT, DISTRIBUTED, FRAMEWORKS
from .measurement import ALLREDUCE, SHAPES
from .neighbours import TOPOLOGIES

T = TypeVar("T", bound="Options")


@dataclass(frozen=True)
class Options:
    """An entry point's options: a frozen dataclass whose fields are its parser's destinations."""

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """The entry point's parser (each class its own)."""
        raise NotImplementedError

    @classmethod
    def parse(cls: Type[T], argv: Optional[List[str]]) -> T:
        """The options of the command line ``argv`` (``sys.argv[1:]`` where None); exits naming a bad option."""
        namespace = cls.parser().parse_args(argv)
        fields = {f.name for f in dataclasses.fields(cls)}
        if set(vars(namespace)) != fields:
            raise TypeError("%s and its parser disagree: %s" % (cls.__name__, sorted(set(vars(namespace)) ^ fields)))
        return cls(**vars(namespace))


@dataclass(frozen=True)
class UserModelOptions(Options):
    """The options of an entry point that trains, times, checks or evaluates a user's model (``--model-*``; empty for
    a built-in model), which :func:`hvdflow_trainer.user_code.user_model_of` reads."""

    model_code: str = ""
    model_build: str = ""
    model_script: str = ""
    model_params: str = "{}"
    model_loss: Optional[str] = None
    model_metrics: Optional[str] = None


def _framework_options(parser: argparse.ArgumentParser, distributed: bool = True) -> None:
    parser.add_argument("--framework", choices=tuple(FRAMEWORKS), default=DEFAULT,
                        help="; ".join("%s: %s" % (name, f.about) for name, f in FRAMEWORKS.items()))
    if distributed:
        parser.add_argument("--distributed", choices=DISTRIBUTED, default=DISTRIBUTED[0],
                            help="the framework's data parallelism (%s)" % "; ".join(
                                "%s: %s" % (name, ", ".join(f.distributed)) for name, f in FRAMEWORKS.items()))


def _user_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-code", default="", help="the user's code folder (--model user)")
    parser.add_argument("--model-build", default="", help="module:function that builds the model")
    parser.add_argument("--model-script", default="", help="a training script of the folder, in place of a build")
    parser.add_argument("--model-params", default="{}", help="JSON object: the build function's keyword arguments")
    parser.add_argument("--model-loss", default=None, help="module:function returning the loss")
    parser.add_argument("--model-metrics", default=None, help="module:function returning the metrics")


def _fault_options(parser: argparse.ArgumentParser) -> None:
    """The hidden test options (the host's :func:`hvdflow.launch.faults.trainer_args` writes them;
    :func:`hvdflow_trainer.faults.injected_failures` reads them)."""
    for option, kind in (("--fail-rank", int), ("--fail-epoch", int), ("--fail-step", int), ("--fail-how", str)):
        parser.add_argument(option, type=kind, action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--fail-once", action="count", default=0, help=argparse.SUPPRESS)
    parser.add_argument("--slow-steps", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--slow-input", type=float, default=0.0, help=argparse.SUPPRESS)


@dataclass(frozen=True)
class TrainOptions(UserModelOptions):
    """A rank of a training (``python3 -m hvdflow_trainer.train``): the data, the model and its hyperparameters, the
    run's checkpoints and identity, and a test's injected failures."""

    framework: str = DEFAULT
    dataset: str = ""
    out: str = ""
    distributed: str = DISTRIBUTED[0]
    model: str = "mlp"
    hidden_units: int = 64
    epochs: int = 10
    batch_size: int = 32
    learning_rate: float = 0.01
    momentum: float = 0.9
    warmup_epochs: int = 1
    seed: int = 1234
    shuffle_buffer: int = 10000
    deterministic_allreduce: bool = False
    strategy: str = "allreduce"
    topology: str = "ring"
    shard_order: str = "shuffled"
    no_op_determinism: bool = False
    threads: int = 1
    checkpoint_dir: str = ""
    identity: str = ""
    elastic_ranks: int = 0
    membership: str = ""
    checkpoint_every: int = 1
    keep_checkpoints: int = 2
    usage_seconds: float = DEFAULT_USAGE_SECONDS
    fail_rank: List[int] = field(default_factory=list)
    fail_epoch: List[int] = field(default_factory=list)
    fail_step: List[int] = field(default_factory=list)
    fail_how: List[str] = field(default_factory=list)
    fail_once: int = 0
    slow_steps: float = 0.0
    slow_input: float = 0.0

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """``train``'s options."""
        parser = argparse.ArgumentParser(prog="hvdflow_trainer.train", description=TrainOptions.__doc__)
        parser.add_argument("--dataset", required=True, help="prepared dataset directory (with index.json)")
        parser.add_argument("--out", required=True, help="output directory")
        _framework_options(parser)
        parser.add_argument("--model", default="mlp", help="mlp, small-cnn, resnet50, or user (--model-code and --model-build)")
        parser.add_argument("--hidden-units", type=int, default=64)
        parser.add_argument("--epochs", type=int, default=10)
        parser.add_argument("--batch-size", type=int, default=32, help="per rank")
        parser.add_argument("--learning-rate", type=float, default=0.01, help="per rank; scaled by the number of ranks")
        parser.add_argument("--momentum", type=float, default=0.9)
        parser.add_argument("--warmup-epochs", type=int, default=1)
        parser.add_argument("--seed", type=int, default=1234)
        parser.add_argument("--shuffle-buffer", type=int, default=10000, help="records in each rank's shuffle buffer")
        parser.add_argument("--deterministic-allreduce", action="store_true",
                            help="allreduce each tensor on its own (no tensor fusion): reproducible sums with 3+ ranks")
        parser.add_argument("--strategy", choices=("allreduce", "neighbour"), default="allreduce",
                            help="allreduce the gradients, or average models with neighbours after every step")
        parser.add_argument("--topology", choices=TOPOLOGIES, default="ring", help="the neighbours (neighbour strategy)")
        parser.add_argument("--shard-order", choices=("shuffled", "by_label"), default="shuffled",
                            help="deal the training split out as planned (IID), or sorted by label (non-IID)")
        parser.add_argument("--no-op-determinism", action="store_true",
                            help="leave TensorFlow's op determinism off (an experiment's deterministic: false)")
        parser.add_argument("--threads", type=int, default=1,
                            help="TensorFlow's intra-op and tf.data's threads per rank: the cores it owns (the launcher says)")
        cls._run_options(parser)
        _user_model_options(parser)
        _fault_options(parser)
        return parser

    @staticmethod
    def _run_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--checkpoint-dir", required=True, help="the run's checkpoint folder (kept across attempts)")
        parser.add_argument("--identity", required=True, help="JSON file: the run's identity (hvdflow_runstate.run_identity)")
        parser.add_argument("--elastic-ranks", type=int, default=0,
                            help="train under Horovod's elastic API; the rank count the global batch and rate are set for")
        parser.add_argument("--membership", default="", help="elastic: the JSON-lines file rank 0 appends each membership to")
        parser.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints")
        parser.add_argument("--keep-checkpoints", type=int, default=2, help="checkpoints kept")
        parser.add_argument("--usage-seconds", type=float, default=DEFAULT_USAGE_SECONDS,
                            help="seconds between samples of the rank's CPU, memory and GPU use (0: none)")


@dataclass(frozen=True)
class BenchmarkOptions(UserModelOptions):
    """A rank of a benchmark (``python3 -m hvdflow_trainer.benchmark``): a built-in model's, a user's model's or the
    allreduce sweep's timed steps."""

    framework: str = DEFAULT
    out: str = ""
    kind: str = ""
    distributed: str = DISTRIBUTED[0]
    input_shape: Optional[List[int]] = None
    num_classes: Optional[int] = None
    multi_label: bool = False
    launched: float = 0.0
    batch_size: int = 32
    hidden_units: int = 64
    warmup_steps: int = 5
    steps: int = 30
    min_seconds: float = 0.0
    sizes_kib: List[int] = field(default_factory=lambda: [1, 64, 1024, 16384, 65536])
    threads: int = 1
    seed: int = 1234

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """``benchmark``'s options."""
        parser = argparse.ArgumentParser(prog="hvdflow_trainer.benchmark", description=BenchmarkOptions.__doc__)
        parser.add_argument("--out", required=True, help="folder of rank 0's result.json")
        parser.add_argument("--kind", required=True, choices=sorted(SHAPES) + [ALLREDUCE, USER_MODEL],
                            help="a built-in model, the allreduce sweep, or user: a user's model (--model-code, "
                                 "--model-build, --input-shape, --num-classes)")
        parser.add_argument("--input-shape", type=int, nargs=3, help="user: H W C of the synthetic batch")
        parser.add_argument("--num-classes", type=int, help="user: the classes of the synthetic labels")
        parser.add_argument("--multi-label", action="store_true", help="user: multi-hot labels")
        _user_model_options(parser)
        parser.add_argument("--launched", type=float, required=True, help="Unix time the launcher started the ranks")
        parser.add_argument("--batch-size", type=int, default=32, help="per rank")
        parser.add_argument("--hidden-units", type=int, default=64)
        parser.add_argument("--warmup-steps", type=int, default=5, help="untimed steps first (at least 1)")
        parser.add_argument("--steps", type=int, default=30, help="steps timed after the warm-up")
        parser.add_argument("--min-seconds", type=float, default=0.0,
                            help="time more steps where --steps took less than this (steps_for_window)")
        parser.add_argument("--sizes-kib", type=int, nargs="+", default=[1, 64, 1024, 16384, 65536])
        parser.add_argument("--threads", type=int, default=1, help="TensorFlow's intra-op threads: the rank's cores")
        parser.add_argument("--seed", type=int, default=1234)
        _framework_options(parser)
        return parser


@dataclass(frozen=True)
class CheckModelOptions(UserModelOptions):
    """``python3 -m hvdflow_trainer.check_model``: a user's model built once on the dataset's shapes."""

    framework: str = DEFAULT
    dataset: str = ""
    out: str = ""
    seed: int = 1234
    no_op_determinism: bool = False

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """``check_model``'s options."""
        parser = argparse.ArgumentParser(prog="hvdflow_trainer.check_model", description=CheckModelOptions.__doc__)
        parser.add_argument("--dataset", required=True, help="prepared dataset directory (its index.json)")
        parser.add_argument("--out", required=True, help="JSON file to write")
        parser.add_argument("--seed", type=int, default=1234)
        parser.add_argument("--no-op-determinism", action="store_true", help="the experiment's deterministic: false")
        _framework_options(parser, distributed=False)
        _user_model_options(parser)
        return parser


@dataclass(frozen=True)
class EvaluateOptions(UserModelOptions):
    """``python3 -m hvdflow_trainer.evaluate``: a trained model on a dataset's test split (its framework is the one
    the model's folder holds)."""

    model: str = ""
    dataset: str = ""
    out: str = ""
    batch_size: int = 256

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """``evaluate``'s options."""
        parser = argparse.ArgumentParser(prog="hvdflow_trainer.evaluate", description=EvaluateOptions.__doc__)
        parser.add_argument("--model", required=True, help="the trained model's folder (model.keras or model.pt in it)")
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--out", required=True, help="JSON file to write")
        parser.add_argument("--batch-size", type=int, default=256)
        _user_model_options(parser)
        return parser


@dataclass(frozen=True)
class ElasticDriverOptions(Options):
    """``python3 -m hvdflow_trainer.elastic_driver``: Horovod's elastic driver for hvdflow's launcher."""

    channel: str = ""
    address: str = ""
    iface: str = ""
    ranks: int = 0
    min_ranks: int = 0
    max_ranks: int = 0
    cooldown: int = 60
    timeout: int = 600
    verbose: int = 0

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        """``elastic_driver``'s options."""
        parser = argparse.ArgumentParser(prog="hvdflow_trainer.elastic_driver", description=ElasticDriverOptions.__doc__)
        parser.add_argument("--channel", required=True, help="the folder of files shared with hvdflow's launcher")
        parser.add_argument("--address", required=True, help="this node's address the workers reach the driver at")
        parser.add_argument("--iface", required=True, help="the network interface Gloo uses")
        parser.add_argument("--ranks", type=int, required=True, help="ranks to start with (waits for that many slots)")
        parser.add_argument("--min-ranks", type=int, required=True)
        parser.add_argument("--max-ranks", type=int, required=True)
        parser.add_argument("--cooldown", type=int, default=60, help="seconds a failed host stays out")
        parser.add_argument("--timeout", type=int, default=600, help="seconds to wait for enough slots")
        parser.add_argument("--verbose", type=int, default=0)
        return parser
