"""One launch of Horovod ranks as a single typed value: what runs (the job and its layout), with which launcher,
elastic or not, and where (this machine, or across the nodes of the current Slurm job)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hvdflow.config.profile import SlurmCluster
from hvdflow.launch.cpus import CpuPlan
from hvdflow.launch.job import TrainingJob


@dataclass(frozen=True)
class ElasticSettings:
    """An experiment's ``elastic`` section and the profile's ``elastic_cooldown`` / ``elastic_timeout``."""

    min_ranks: int
    max_ranks: int
    cooldown: int = 60
    timeout: int = 600

    def driver_args(self, ranks: int) -> list[str]:
        """The driver's options for a run that starts with ``ranks``."""
        return ["--ranks", str(ranks), "--min-ranks", str(self.min_ranks), "--max-ranks", str(self.max_ranks),
                "--cooldown", str(self.cooldown), "--timeout", str(self.timeout)]



@dataclass(frozen=True)
class ElasticLaunch:
    """An elastic run: Horovod's elastic settings, and the rank count the run is set for (the experiment's ``ranks``;
    the job's layout has a slot for each)."""

    settings: ElasticSettings
    ranks: int


@dataclass(frozen=True)
class LaunchRequest:
    """``job``'s ranks, each on the cores ``cpus`` gives it, started by ``launcher`` (one of
    :data:`~hvdflow.config.profile.LAUNCHERS`); ``elastic`` for an elastic run (None: a fixed one); ``slurm``: across
    the nodes of the current Slurm job (None: on this machine, the ranks reaching each other over ``iface``).
    ``timeout`` is the profile's own limit in seconds, if it sets one; rank 0's progress lines go to ``progress``."""

    job: TrainingJob
    launcher: str
    cpus: CpuPlan
    elastic: Optional[ElasticLaunch] = None
    slurm: Optional[SlurmCluster] = None
    iface: str = "lo"
    timeout: Optional[float] = None
    progress: Optional[Path] = None
