"""Which records each Horovod rank reads: whole shards when they divide evenly enough, else every size-th record.

Reading whole shards means each rank reads only its own bytes, which is what scales; but every rank must take the
same number of steps, so each takes as many records as the rank with the fewest has. Shards go to ranks greedily
(largest first, to the rank with the fewest records so far). When that would drop more than ``1 - MIN_SHARE`` of a
rank's fair share (few or uneven shards, as in a small dataset), each rank reads all shards and keeps every size-th
record instead, which loses at most ``size - 1`` records.
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
