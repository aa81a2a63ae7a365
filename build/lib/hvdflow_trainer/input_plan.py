"""Which records each Horovod rank reads, in which order: whole shards when they divide evenly enough, else every
size-th record; dealt out sorted by label for non-IID runs; shuffled with a seed per epoch.

Reading whole shards means each rank reads only its own bytes, which is what scales; but every rank must take the
same number of steps, so each takes as many records as the rank with the fewest has. Shards go to ranks greedily
(largest first, to the rank with the fewest records so far). When that would drop more than ``1 - MIN_SHARE`` of a
rank's fair share (few or uneven shards, as in a small dataset), each rank reads all shards and keeps every size-th
record instead, which loses at most ``size - 1`` records.

Framework-neutral: a framework's data pipeline reads the records this plan names.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

MIN_SHARE = 0.9


def assign_shards(records: List[int], size: int) -> List[List[int]]:
    """Shard positions per rank, each rank's in ascending order: largest shards first, to the least loaded rank."""
    loads = [0] * size
    groups: List[List[int]] = [[] for _ in range(size)]
    for shard in sorted(range(len(records)), key=lambda i: (-records[i], i)):
        rank = min(range(size), key=lambda r: (loads[r], r))
        groups[rank].append(shard)
        loads[rank] += records[shard]
    return [sorted(group) for group in groups]


def plan_input(records: List[int], size: int) -> Tuple[str, Optional[List[List[int]]], int]:
    """``(mode, shard positions per rank or None, records per rank)``; mode is ``files`` or ``records``.

    ValueError if the split has fewer records than ranks.
    """
    fair = sum(records) // size
    if fair == 0:
        raise ValueError("the split has %d records, fewer than the %d ranks" % (sum(records), size))
    if len(records) >= size:
        groups = assign_shards(records, size)
        per_rank = min(sum(records[i] for i in group) for group in groups)
        if per_rank >= MIN_SHARE * fair:
            return "files", groups, per_rank
    return "records", None, fair


def epoch_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of one epoch: a pure function of the run's seed and the epoch number."""
    return (seed * 1000003 + epoch) % (2 ** 31 - 1)


def label_sorted_positions(labels: List[int], rank: int, size: int) -> List[int]:
    """The positions (in the split's record order) of this rank's records when the split is dealt out sorted by label.

    ``labels`` are the split's first labels, one per record in order (-1 for a record without one). The records are
    sorted by them (stable, so ties keep the split's order) and rank r takes the r-th of ``size`` equal blocks: each
    rank sees few classes (non-IID data, as when each site holds its own).
    """
    per_rank = len(labels) // size
    if per_rank == 0:
        raise ValueError("the split has %d records, fewer than the %d ranks" % (len(labels), size))
    order = sorted(range(len(labels)), key=labels.__getitem__)
    return sorted(order[rank * per_rank:(rank + 1) * per_rank])
