"""Neighbour averaging with Horovod's PyTorch API (the graphs and the method: :mod:`hvdflow_trainer.neighbours`).

After every optimizer step each rank sends its model (parameters and floating buffers, BatchNorm's statistics
included, as one flat float32 vector) to its out-neighbours in one ``horovod.torch.alltoall`` and replaces it by the
uniform average of its own and its in-neighbours' vectors, summed stacked in ascending rank order in one reduction:
on a complete graph every rank sums the same stack the same way, and the ranks stay bit-identical. The step index is
the run's global step, which a resumed run recomputes from its position: it exchanges with the peers the
uninterrupted one would have (``onepeer-exp2`` cycles through them).
"""

from __future__ import annotations

from typing import Dict, List

import torch

from ..neighbours import check_topology, peers


def averaged_tensors(model: torch.nn.Module) -> List[torch.Tensor]:
    """The tensors the ranks average: the model's floating state (parameters and buffers), in the state dict's
    order, sharing their storage (writing into them changes the model)."""
    return [tensor for tensor in model.state_dict().values() if tensor.is_floating_point()]


def flat(tensors: List[torch.Tensor]) -> torch.Tensor:
    """The tensors' values as one flat float32 vector, in order."""
    return torch.cat([t.detach().reshape(-1).float() for t in tensors])


def assign_flat(tensors: List[torch.Tensor], vector: torch.Tensor) -> None:
    """Put a flat vector (as :func:`flat` makes) back into the tensors."""
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(vector[offset:offset + t.numel()].reshape(t.shape).to(t.dtype))
            offset += t.numel()


class NeighbourAveraging:
    """The exchange after every step, and the bytes it sent (counted per epoch)."""

    def __init__(self, hvd, model: torch.nn.Module, topology: str, rank: int, size: int) -> None:  # type: ignore[no-untyped-def]
        check_topology(topology, size)
        self.hvd, self.tensors = hvd, averaged_tensors(model)
        self.topology, self.rank, self.size = topology, rank, size
        self.bytes_sent = self.exchanges = 0

    def average(self, step: int) -> None:
        """Replace the model by the uniform average of this rank's and its in-neighbours' models at global ``step``
        (from 0)."""
        mine = flat(self.tensors)
        send, receive = peers(self.topology, self.size, self.rank, step)
        splits = torch.tensor([1 if r in send else 0 for r in range(self.size)], dtype=torch.int32)
        rows, received = self.hvd.alltoall(torch.stack([mine] * len(send)), splits=splits, name="hvdflow_neighbours")
        expected = [1 if r in receive else 0 for r in range(self.size)]
        if [int(n) for n in received.tolist()] != expected:
            raise RuntimeError("rank %d at step %d: a neighbour's model is missing or extra (received %s, expected %s)"
                               % (self.rank, step, received.tolist(), expected))
        contributions: Dict[int, torch.Tensor] = {self.rank: mine}
        contributions.update(zip(receive, rows.unbind(0)))
        total = torch.stack([contributions[r] for r in sorted(contributions)]).sum(0)
        assign_flat(self.tensors, total / float(len(contributions)))
        self.bytes_sent += len(send) * mine.numel() * mine.element_size()
        self.exchanges += 1

    def epoch_bytes_per_step(self) -> float:
        """Bytes sent per exchange since the last call (the epoch's), and start counting anew."""
        sent = self.bytes_sent / self.exchanges if self.exchanges else 0.0
        self.bytes_sent = self.exchanges = 0
        return sent


def average_once(hvd, model: torch.nn.Module) -> None:  # type: ignore[no-untyped-def]
    """Replace every rank's model by the ranks' average, one allreduce per tensor (the end of a neighbour run)."""
    with torch.no_grad():
        for i, t in enumerate(averaged_tensors(model)):
            t.copy_(hvd.allreduce(t.detach().clone(), op=hvd.Average, name="hvdflow_final_average_%d" % i))
