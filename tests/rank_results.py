"""A whole rank result as the trainer writes it (``rank-<r>.json``), for tests that need one without training."""

from __future__ import annotations

from typing import Any

from hvdflow_wire.rank import RankResult

SHA = "ab" * 32


def rank_result_json(rank: int, **changes: Any) -> dict[str, Any]:
    """Rank ``rank`` of two on one host, its keys changed by ``changes``: the JSON object of ``rank-<r>.json``."""
    return {"rank": rank, "size": 2, "local_rank": rank, "local_size": 2, "cross_rank": 0, "cross_size": 1,
            "hostname": "h", "controller": "gloo", "strategy": "allreduce", "topology": None,
            "cuda_visible_devices": None, "cpus": [rank], "threads": 1, "elastic_worker": None,
            "horovod_hostname": None,
            "machine": {"cpu": {"model": "m", "flags": ["avx2"], "architecture": "x86_64"}, "gpus": [],
                        "nvidia_driver": None},
            "numerics": {"onednn_enabled": True, "TF_ENABLE_ONEDNN_OPTS": None, "op_determinism": True,
                         "intra_op_threads": 1, "inter_op_threads": 1, "deterministic_allreduce": False,
                         "HOROVOD_FUSION_THRESHOLD": None},
            "weights_sha256": SHA, "epochs_done": 10, "resumed_from": {"epoch": 0, "step": 0},
            "epoch_seconds": [0.5, 0.25], "first_step_unix": 1.0, "train_records_per_rank": 64, "steps_per_epoch": 2,
            "input_sharding": "files", "framework": "tensorflow", "framework_version": "2.15.1", "distributed": "horovod",
            "tensorflow": "2.15.1", "horovod": "0.28.1", "python": "3.11.2", "execmode": "P1",
            "usage": {"interval_seconds": 5.0, "cores": 1, "wall_seconds": 12.5, "cpu_seconds": 10.0,
                      "cpu_utilization": 0.8, "peak_rss_mib": 612.4, "samples": [[5.0, 0.75, 600.1], [10.0, 0.9, 610.0]],
                      "gpu": None, "gpu_absent": "no NVIDIA driver on h"},
            "step_times": [{"epoch": 0, "steps": 2, "input_seconds": 0.05, "compute_seconds": 0.3,
                            "communication_seconds": 0.1},
                           {"epoch": 1, "steps": 2, "input_seconds": 0.01, "compute_seconds": 0.15,
                            "communication_seconds": 0.05}], **changes}


def rank_result(rank: int, **changes: Any) -> RankResult:
    """The same as a :class:`RankResult`."""
    return RankResult.from_json(rank_result_json(rank, **changes), f"rank {rank}")
