"""The ranks of a PyTorch run and what they do together, in either distributed mode:

- ``horovod``: Horovod's PyTorch API (``horovod.torch``): Gloo, the rendezvous hvdflow's launchers already run.
- ``ddp``: PyTorch's own ``torch.distributed`` (Gloo on CPU, NCCL on GPU) and ``DistributedDataParallel``, started
  from the same rank variables (``HOROVOD_RANK``, ``HOROVOD_SIZE``, ...) with no torchrun: rank 0 opens a
  ``TCPStore`` on its address on the launcher's interface (``HOROVOD_GLOO_IFACE``) and publishes ``host:port`` in
  the run's rendezvous server (Horovod's key-value store, which every launcher starts), where the other ranks read it.

Both give the training loop the same calls (:class:`Ranks`): the layout of the ranks, the max/mean allreduce of a few
numbers (the agreed stop, the metrics), the model wrapped for data-parallel steps, and the start broadcast.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from datetime import timedelta
from typing import Any, Dict, List, Optional

import torch

from ..network import interface_address

STORE_SCOPE = "hvdflow-ddp"
"""The rendezvous server's scope where rank 0 publishes its TCPStore's ``host:port``."""
STORE_WAIT_SECONDS = 300.0


class Ranks:
    """This process's rank among ``size`` and the collective calls of its distributed mode."""

    mode = ""

    def __init__(self, rank: int, size: int, local_rank: int, local_size: int, cross_rank: int, cross_size: int) -> None:
        self.rank, self.size, self.local_rank, self.local_size = rank, size, local_rank, local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size

    def allreduce_max(self, value: int) -> int:
        """The largest of the ranks' ``value``."""
        raise NotImplementedError

    def allreduce_mean(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` (float64, on this rank's device) averaged over the ranks: the sums in a fixed order, divided
        by the rank count; the same on every rank."""
        raise NotImplementedError

    def mean_of(self, values: List[float]) -> List[float]:
        """A few numbers averaged over the ranks."""
        return [float(v) for v in self.allreduce_mean(torch.tensor(values, dtype=torch.float64)).tolist()]

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):  # type: ignore[no-untyped-def]
        """``(module to call, optimizer to step)``: gradients averaged over the ranks at each step."""
        raise NotImplementedError

    def step(self, optimizer: torch.optim.Optimizer) -> float:
        """The optimizer's step; the seconds it waited for the gradients' averages before stepping (0 where the
        backward pass waited for them, as DDP's does)."""
        optimizer.step()
        return 0.0

    def broadcast_start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Every rank starts from rank 0's weights and optimizer state."""
        raise NotImplementedError

    def allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """``tensor`` summed over the ranks (a new tensor; ``name`` identifies it to Horovod)."""
        raise NotImplementedError

    def broadcast_object(self, obj: Any, root: int) -> Any:
        """``root``'s ``obj`` on every rank (pickled)."""
        raise NotImplementedError

    def allgather_object(self, obj: Any) -> List[Any]:
        """Every rank's ``obj``, in rank order."""
        raise NotImplementedError

    def barrier(self) -> None:
        """All ranks meet."""
        self.allreduce_max(0)

    def follow_membership(self) -> None:
        """Read this process's place again: an elastic run may have changed the ranks (a fixed run's stay)."""

    def shutdown(self) -> None:
        """Leave the ranks' group."""


class HorovodRanks(Ranks):
    """Horovod's PyTorch API."""

    mode = "horovod"

    def __init__(self) -> None:
        import horovod.torch as hvd

        hvd.init()
        self.hvd = hvd
        self.follow_membership()

    def allreduce_max(self, value: int) -> int:
        return int(self.hvd.allreduce(torch.tensor([value], dtype=torch.int64), op=self.hvd.Max,
                                      name="hvdflow_max").item())

    def allreduce_mean(self, values: torch.Tensor) -> torch.Tensor:
        return self.hvd.allreduce(values, op=self.hvd.Sum, name="hvdflow_mean") / self.size

    def allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        return self.hvd.allreduce(tensor, op=self.hvd.Sum, name=name)

    def broadcast_object(self, obj: Any, root: int) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=root)

    def allgather_object(self, obj: Any) -> List[Any]:
        return list(self.hvd.allgather_object(obj))

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):  # type: ignore[no-untyped-def]
        return model, self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def step(self, optimizer: torch.optim.Optimizer) -> float:
        """Horovod's optimizer waits for the gradients' averages (``synchronize``) before it steps: that wait, timed
        apart from the step (the same arithmetic as ``step()`` alone)."""
        synchronize = getattr(optimizer, "synchronize", None)
        if synchronize is None:  # the neighbour strategy's own optimizer
            return super().step(optimizer)
        begun = time.perf_counter()
        synchronize()
        waited = time.perf_counter() - begun
        with optimizer.skip_synchronize():  # type: ignore[attr-defined]
            optimizer.step()
        return waited

    def broadcast_start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    def follow_membership(self) -> None:
        hvd = self.hvd
        super().__init__(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())

    def controller(self) -> str:
        """Horovod's controller of this run."""
        return "mpi" if self.hvd.mpi_enabled() else "gloo"

    def shutdown(self) -> None:
        self.hvd.shutdown()


def _store_url(env: Dict[str, str]) -> str:
    return "http://%s:%s/%s/store" % (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"],
                                      STORE_SCOPE)


def publish_store(env: Dict[str, str], address: str) -> None:
    """Rank 0: put ``host:port`` of its TCPStore into the run's rendezvous server."""
    request = urllib.request.Request(_store_url(env), data=address.encode(), method="PUT")
    with urllib.request.urlopen(request, timeout=30):
        pass


def find_store(env: Dict[str, str], timeout: float = STORE_WAIT_SECONDS) -> str:
    """The other ranks: rank 0's ``host:port``, once it is published (RuntimeError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(_store_url(env), timeout=30) as reply:
                return str(reply.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError("rank 0 published no torch.distributed store at %s within %.0f s"
                               % (_store_url(env), timeout))
        time.sleep(0.2)


class DdpRanks(Ranks):
    """PyTorch's ``torch.distributed``, Gloo on CPU and NCCL on GPU, started from hvdflow's rank variables."""

    mode = "ddp"

    def __init__(self, gpu: Optional[int]) -> None:
        import torch.distributed as dist

        env = dict(os.environ)
        size = int(env["HOROVOD_SIZE"])
        super().__init__(int(env["HOROVOD_RANK"]), size, int(env["HOROVOD_LOCAL_RANK"]), int(env["HOROVOD_LOCAL_SIZE"]),
                         int(env.get("HOROVOD_CROSS_RANK", "0")), int(env.get("HOROVOD_CROSS_SIZE", "1")))
        iface = env.get("HOROVOD_GLOO_IFACE", "lo")
        os.environ["GLOO_SOCKET_IFNAME"] = iface  # Gloo's pairs on the launcher's network, not the hostname's address
        timeout = timedelta(seconds=STORE_WAIT_SECONDS)
        if self.rank == 0:
            host = interface_address(iface)
            store = dist.TCPStore(host, 0, size, is_master=True, timeout=timeout, wait_for_workers=False,
                                  use_libuv=False)  # Debian builds torch without libuv
            publish_store(env, "%s:%d" % (host, store.port))
        else:
            host, port = find_store(env).rsplit(":", 1)
            store = dist.TCPStore(host, int(port), size, is_master=False, timeout=timeout, use_libuv=False)
        self.gpu = gpu
        backend = "nccl" if gpu is not None else "gloo"
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=size, timeout=timeout)
        self.dist, self.store = dist, store  # rank 0's store serves the group as long as it is referenced

    def _device(self) -> torch.device:
        return torch.device("cuda", self.gpu) if self.gpu is not None else torch.device("cpu")

    def allreduce_max(self, value: int) -> int:
        tensor = torch.tensor([value], dtype=torch.int64, device=self._device())
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX)
        return int(tensor.item())

    def allreduce_mean(self, values: torch.Tensor) -> torch.Tensor:
        tensor = values.to(self._device(), copy=True)
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.SUM)
        return tensor.cpu() / self.size

    def allreduce_sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        summed = tensor.clone()
        self.dist.all_reduce(summed, op=self.dist.ReduceOp.SUM)
        return summed

    def broadcast_object(self, obj: Any, root: int) -> Any:
        holder = [obj]
        self.dist.broadcast_object_list(holder, src=root)
        return holder[0]

    def allgather_object(self, obj: Any) -> List[Any]:
        gathered: List[Any] = [None] * self.size
        self.dist.all_gather_object(gathered, obj)
        return gathered

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):  # type: ignore[no-untyped-def]
        from torch.nn.parallel import DistributedDataParallel

        ids = None if self.gpu is None else [self.gpu]
        # buffers (BatchNorm's running statistics) as Horovod's API has them: each rank's own, averaged over the
        # ranks at the epoch's end (by the loop), not rank 0's broadcast before every forward (DDP's default), so
        # that both modes train one model, bit for bit
        return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False), optimizer

    def broadcast_start(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        # DistributedDataParallel broadcasts rank 0's parameters and buffers when it wraps the model; the optimizer's
        # state is empty before the first step, or restored by every rank from the same checkpoint
        pass

    def controller(self) -> str:
        """torch.distributed's backend of this run."""
        return str(self.dist.get_backend())

    def shutdown(self) -> None:
        # Gloo's group ends with the process. destroy_process_group() hung one rank for the store's whole timeout now
        # and then (torch 2.6, after the last barrier, with the other rank gone or still waiting: 2026-11-27), so it
        # is called for NCCL only, whose communicators want it
        if self.gpu is not None:
            self.dist.destroy_process_group()


def horovod_api(ranks: Ranks, what: str):  # type: ignore[no-untyped-def]
    """The ``horovod.torch`` module of a Horovod run; ValueError naming ``what`` needs it under DDP."""
    if not isinstance(ranks, HorovodRanks):
        raise ValueError("%s needs distributed horovod (Horovod's PyTorch API), not %s" % (what, ranks.mode))
    return ranks.hvd


def join_ranks(mode: str, gpu: Optional[int]) -> Ranks:
    """This process joins the run's ranks in distributed ``mode`` (``horovod`` or ``ddp``)."""
    if mode == "horovod":
        return HorovodRanks()
    if mode == "ddp":
        return DdpRanks(gpu)
    raise ValueError("distributed mode %r is neither horovod nor ddp" % mode)
