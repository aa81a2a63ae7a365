"""Which GPU a rank uses, whatever framework lists the devices: its own, one per rank."""

from __future__ import annotations

from typing import List, TypeVar

Device = TypeVar("Device")


def pick_gpu(gpus: List[Device], local_rank: int) -> Device:
    """The GPU this rank uses: the only one visible (its launcher narrowed the list to its own), else its local rank's."""
    if len(gpus) == 1:
        return gpus[0]
    if local_rank >= len(gpus):
        raise RuntimeError("local rank %d sees %d GPUs and none of its own: give each rank one GPU"
                           % (local_rank, len(gpus)))
    return gpus[local_rank]
