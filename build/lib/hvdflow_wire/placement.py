"""Where one rank is, as Horovod counts it: globally, on its host, and across hosts. Defined once for every value that
carries a rank's place: the launcher's (``hvdflow.launch.rank_env``), an elastic run's slot (:mod:`.elastic`) and
the rank's result (:mod:`.rank`)."""

from __future__ import annotations

from dataclasses import dataclass

from .values import WireError


@dataclass(frozen=True)
class Placement:
    """One rank's position: ``rank`` of ``size``, ``local_rank`` of ``local_size`` on its host ``hostname``,
    ``cross_rank`` of ``cross_size`` among the hosts with a rank of that local rank. WireError (a ValueError) for a
    position outside its count."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    hostname: str

    def __post_init__(self) -> None:
        for what, position, count in (("rank", self.rank, self.size), ("local rank", self.local_rank, self.local_size),
                                      ("cross rank", self.cross_rank, self.cross_size)):
            if not 0 <= position < count:
                raise WireError("%s %d outside 0..%d" % (what, position, count - 1))
