"""This rank's data for PyTorch: the records :mod:`hvdflow_trainer.input_plan` gives it, read from the verified
TFRecord shards without TensorFlow (:mod:`hvdflow_trainer.tfrecord`), in an epoch's order, decoded and batched.

The records a rank reads are the Keras pipeline's (:mod:`hvdflow_trainer.keras.data`): whole shards per rank when the
plan deals files, else every ``size``-th record from ``rank`` on, or the label-sorted block of a non-IID run; then the
first ``per_rank`` of them. An epoch's order is a permutation of those records drawn from
:func:`~hvdflow_trainer.input_plan.epoch_seed` (numpy's PCG64), so it depends only on (seed, epoch, ranks, rank) and a
resumed epoch skips exactly the batches done. (tf.data's shuffle buffer is TensorFlow's own algorithm; this is a
full shuffle of the rank's records, which a buffer at least as large as the share gives too.)
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..input_plan import epoch_seed, plan_input
from ..tfrecord import SampleDecoder, parse_example, read_span, split_spans


class SplitRecords:
    """The records of one split's shards (their places in the files) and how to decode them."""

    def __init__(self, paths: Sequence[str], index: Dict[str, object]) -> None:
        self.paths = list(paths)
        self.spans = split_spans(self.paths)
        self.decode = SampleDecoder(index)

    def first_labels(self) -> List[int]:
        """Every record's first label, in the split's record order (-1 for a record without one)."""
        labels = []
        for data in self.read(range(len(self.spans))):
            y = parse_example(data).get("y")
            labels.append(int(y[0]) if isinstance(y, list) and y else -1)
        return labels

    def read(self, positions: Sequence[int]) -> Iterator[bytes]:
        """The serialized records at ``positions`` (in the split's order), in the order given."""
        handles: Dict[int, object] = {}
        try:
            for position in positions:
                file_number, offset, length = self.spans[position]
                if file_number not in handles:
                    handles[file_number] = open(self.paths[file_number], "rb")
                yield read_span(handles[file_number], (offset, length))
        finally:
            for handle in handles.values():
                handle.close()  # type: ignore[attr-defined]


def rank_positions(records: SplitRecords, counts: List[int], rank: int, size: int,
                   positions: Optional[List[int]] = None) -> Tuple[List[int], str]:
    """``(the split positions this rank reads, sharding mode)``, as the Keras pipeline deals them."""
    if positions is not None:
        return list(positions), "by_label"
    mode, groups, per_rank = plan_input(counts, size)
    if groups is not None:
        starts = np.cumsum([0] + counts)
        mine = [p for shard in groups[rank] for p in range(int(starts[shard]), int(starts[shard + 1]))]
    else:
        mine = list(range(rank, len(records.spans), size))
    return mine[:per_rank], mode


class RankBatches:
    """This rank's share of a split, batched: ``epoch(e, skip)`` yields ``(x, y)`` tensors in epoch ``e``'s order."""

    def __init__(self, records: SplitRecords, positions: List[int], batch: int, seed: int, shuffle: bool) -> None:
        self.records, self.positions, self.batch, self.seed, self.shuffle = records, positions, batch, seed, shuffle
        self.steps = -(-len(positions) // batch)

    def order(self, epoch: int) -> List[int]:
        """The positions in epoch ``epoch``'s order."""
        if not self.shuffle:
            return list(self.positions)
        permutation = np.random.Generator(np.random.PCG64(epoch_seed(self.seed, epoch))).permutation(len(self.positions))
        return [self.positions[i] for i in permutation]

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
        """The batches of ``epoch`` after the first ``skip``: x as NCHW float32 (or N x features), y as int64 labels
        or float32 multi-hot rows."""
        order = self.order(epoch)[skip * self.batch:]
        for start in range(0, len(order), self.batch):
            samples = [self.records.decode(data) for data in self.records.read(order[start:start + self.batch])]
            x = torch.from_numpy(np.stack([s[0] for s in samples]))
            if x.dim() == 4:  # hvdflow stores images height x width x channels; torch's convolutions take NCHW
                x = x.permute(0, 3, 1, 2).contiguous()
            labels = [s[1] for s in samples]
            y = torch.from_numpy(np.stack(labels)) if self.records.decode.multi else torch.tensor(labels, dtype=torch.int64)
            yield x, y
