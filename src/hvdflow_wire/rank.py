"""A rank's result (``rank-<r>.json``): written by every rank of the trainer after its last epoch, last of its
outputs, and read by the host: the check that every rank finished with the same weights, the run record, the smoke
job's summary, and the elastic launcher (whether a worker that exited 0 finished the training).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .placement import Placement
from .steps import EpochSteps
from .usage import RankUsage
from .values import from_json, read_object, to_json, write_object


@dataclass(frozen=True)
class RankResult(Placement):
    """One rank's placement (:class:`~hvdflow_wire.placement.Placement`'s fields), machine, numerics, versions and the
    sha256 of its final weights.

    ``machine`` is the rank's CPU, GPUs and NVIDIA driver, ``numerics`` the settings that fix the order of its sums
    (both as the trainer saw them: plain JSON); ``resumed_from`` the epoch and step the attempt began at;
    ``elastic_worker`` the launcher's worker id of an elastic run (None otherwise).
    """

    controller: str
    strategy: str
    topology: Optional[str]
    cuda_visible_devices: Optional[str]
    cpus: List[int]
    threads: int
    elastic_worker: Optional[str]
    horovod_hostname: Optional[str]
    machine: Dict[str, Any]
    numerics: Dict[str, Any]
    weights_sha256: str
    epochs_done: int
    resumed_from: Dict[str, int]
    epoch_seconds: List[float]
    first_step_unix: Optional[float]
    train_records_per_rank: int
    steps_per_epoch: int
    input_sharding: str
    framework: str
    """``tensorflow`` or ``torch``: what trained the rank's model."""
    framework_version: str
    distributed: str
    """``horovod`` (Horovod's API of the framework) or ``ddp`` (PyTorch's DistributedDataParallel)."""
    tensorflow: str
    """TensorFlow's version, ``none`` in a PyTorch run."""
    horovod: str
    python: str
    execmode: Optional[str]
    """udocker's mode that ran the rank (``HVDFLOW_UDOCKER_MODE``: under ``execmode: auto`` each node's choice); None
    outside udocker."""
    usage: Optional[RankUsage]
    """How the rank used its cores, memory and GPU (:mod:`hvdflow_wire.usage`); None where it was not sampled
    (``--usage-seconds 0``)."""
    step_times: Optional[List[EpochSteps]]
    """Where the rank's training steps spent their time, per epoch (:mod:`hvdflow_wire.steps`); None where it was not
    measured (``--usage-seconds 0``, or a user's own training loop)."""

    def to_json(self) -> Dict[str, Any]:
        """The result as the JSON object of ``rank-<r>.json``."""
        return to_json(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: object, where: str) -> "RankResult":
        """The result from its JSON object; WireError naming ``where`` and what is wrong."""
        return from_json(cls, data, where)

    def write(self, path: str) -> None:
        """Write ``rank-<r>.json`` atomically (indented, key-sorted JSON)."""
        write_object(str(path), self.to_json())

    @classmethod
    def read(cls, path: str) -> "RankResult":
        """The result in ``path``; WireError naming the file and what is wrong."""
        return cls.from_json(read_object(str(path)), str(path))
