"""What a PyTorch rank leaves when its run is done: rank 0's model, history, TensorBoard logs and metrics, and every
rank's result (``rank-<r>.json``), the same files a Keras run leaves.

The model is ``model/model.pt``: one ``torch.save`` of the weights (``state_dict``) and what rebuilds the module
around them (the built-in model's name and sizes, or the user's build function, and the data's shape), and for a
training script's model its TorchScript archive, which :mod:`.evaluate` reads.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import torch

from hvdflow_wire.replace import replaced
from hvdflow_wire.steps import EpochSteps

from ..options import TrainOptions
from ..outputs import rank_result, weights_sha256, write_history, write_metrics
from ..run_control import Position
from ..tensorboard import write_epoch_scalars

MODEL_FILE = "model.pt"
MODEL_FORMAT = "hvdflow-torch-model/1"


def weights(model: torch.nn.Module) -> list:  # type: ignore[type-arg]
    """The model's state (parameters and buffers) as numpy arrays, in the state dict's order."""
    return [tensor.detach().cpu().numpy() for tensor in model.state_dict().values()]


def write_run_outputs(args: TrainOptions, model: torch.nn.Module, layout, history: List[Dict[str, float]],  # type: ignore[no-untyped-def]
                      epoch_seconds: List[float], torchscript: Optional[bytes] = None) -> None:
    """Rank 0's outputs: ``model/model.pt``, ``history.csv``, ``tensorboard/`` and ``metrics.json``. ``torchscript``:
    a training script's model as a TorchScript archive, which evaluation loads without the script's code."""
    folder = os.path.join(args.out, "model")
    os.makedirs(folder, exist_ok=True)
    saved = {"format": MODEL_FORMAT, "model": args.model, "hidden_units": args.hidden_units,
             "feature_shape": list(layout.index["feature_shape"]), "num_classes": int(layout.index["num_classes"]),
             "multi_label": layout.multi, "state_dict": model.state_dict(), "torchscript": torchscript}
    with replaced(os.path.join(folder, MODEL_FILE), mode="wb") as handle:
        torch.save(saved, handle)
    write_history(os.path.join(args.out, "history.csv"), history)
    write_epoch_scalars(os.path.join(args.out, "tensorboard"), history)
    write_metrics(os.path.join(args.out, "metrics.json"), history, args.epochs, epoch_seconds, layout.steps_per_epoch)


def numerics(args: TrainOptions) -> Dict[str, object]:
    """The settings of this process that fix the order of floating-point sums."""
    return {"framework": "torch", "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "intra_op_threads": torch.get_num_threads(), "inter_op_threads": torch.get_num_interop_threads(),
            "deterministic_allreduce": bool(args.deterministic_allreduce),
            "HOROVOD_FUSION_THRESHOLD": os.environ.get("HOROVOD_FUSION_THRESHOLD"),
            "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
            "ONEDNN_MAX_CPU_ISA": os.environ.get("ONEDNN_MAX_CPU_ISA")}


def gpu_facts() -> List[Dict[str, object]]:
    """Name and compute capability of the GPU this rank uses (none on a CPU machine)."""
    if not torch.cuda.is_available():
        return []
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return [{"name": torch.cuda.get_device_name(index), "compute_capability": "%d.%d" % (major, minor)}]


def write_rank_result(args: TrainOptions, ranks, model: torch.nn.Module, position: Position,  # type: ignore[no-untyped-def]
                      start: Position, loop, layout, topology: Optional[str] = None,
                      step_times: Optional[List[EpochSteps]] = None) -> None:
    """This rank's ``rank-<r>.json`` in ``args.out``: placement, versions, the sha256 of its final weights, and how
    its run went; ``topology``: the neighbour strategy's graph; ``step_times``: where its steps spent their time
    (None: not measured)."""
    import horovod

    result = rank_result(
        args, position, start, layout, gpu_facts(),
        rank=ranks.rank, size=ranks.size, local_rank=ranks.local_rank, local_size=ranks.local_size,
        cross_rank=ranks.cross_rank, cross_size=ranks.cross_size, controller=ranks.controller(), topology=topology,
        numerics=numerics(args), weights_sha256=weights_sha256(weights(model)),
        epoch_seconds=loop.seconds, first_step_unix=loop.first_step_unix, step_times=step_times,
        framework="torch", framework_version=torch.__version__, distributed=ranks.mode,
        tensorflow="none", horovod=horovod.__version__,
    )
    result.write(os.path.join(args.out, "rank-%d.json" % result.rank))
