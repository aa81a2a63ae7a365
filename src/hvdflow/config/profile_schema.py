"""The keys of a cluster profile's ``hvdflow.yaml``, as a JSON schema: one source for the keys the profile may hold.

:mod:`hvdflow.config.profile` accepts exactly these keys (its required and optional ones are read from here) and
checks their values (the ``runtime:`` section's by its kind: :mod:`hvdflow.runtime`), which may be written as
``$VARIABLE`` or ``${VARIABLE:-default}`` and so are checked after expansion; ``docs/reference/profile.md`` is
rendered from this schema (:mod:`hvdflow.config.reference`), so a key added here is accepted and documented at once.
The choices are the code's own constants.
"""

from __future__ import annotations

from typing import Any

from hvdflow.runtime import section_schema

LAUNCHERS = ("gloo", "mpi")
SCHEDULERS = ("none", "slurm")
DEFAULT_SIGNAL_GRACE = 120
DEFAULT_ELASTIC_COOLDOWN = 60
DEFAULT_ELASTIC_TIMEOUT = 600
LOCAL_CPU_BINDS = ("cores", "none")
GPU_TYPE_PATTERN = r"^[A-Za-z0-9_.-]+$"
"""A GRES type as slurm.conf writes one (``Gres=gpu:a100:4``)."""

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "description": "hvdflow's settings of one cluster (profiles/<cluster>/hvdflow.yaml): where and how it runs there.",
    "type": "object",
    "additionalProperties": False,
    "required": ["registry", "runtime", "launcher"],
    "properties": {
        "registry": {
            "type": "string",
            "description": "http(s)://HOST[:PORT] serving the catalogue's images, or none for a site without registry "
                           "access: the pull then takes the image the lock pins from `hvdflow image load` (its layers "
                           "hashed again) and opens no connection."},
        "runtime": section_schema(),
        "launcher": {
            "enum": list(LAUNCHERS),
            "description": "gloo (hvdflow starts Horovod's rendezvous server; under Slurm, srun starts one rank per "
                           "task) or mpi (the host's mpirun, one udocker run per rank; under Slurm through Open MPI's "
                           "Slurm support; host and image Open MPI must match)."},
        "network_interface": {
            "type": "string",
            "description": "The interface Gloo binds to: a name (ib0, hsn0), or auto, the interface towards the "
                           "job's first node. Default: lo without a scheduler, auto with Slurm."},
        "cpu_bind": {
            "type": "string", "default": "cores",
            "description": "How each rank is bound to the cores it owns. Without a scheduler: cores (each rank gets "
                           "cores // ranks of the job's cores) or none. With Slurm: srun's --cpu-bind value for the "
                           "ranks' steps (cores, threads, sockets, none, map_cpu:...), each rank owning the train "
                           "job's cpus_per_task."},
        "scheduler": {"enum": list(SCHEDULERS), "default": "none",
                      "description": "none (this machine) or slurm (then the slurm section is required)."},
        "step_timeout_minutes": {
            "type": "number", "exclusiveMinimum": 0,
            "description": "A limit of hvdflow's own on each pipeline step (a step past it is stopped and named). "
                           "Unset: none, and under Slurm the job's time limit is the only one."},
        "elastic_cooldown_seconds": {
            "type": "integer", "minimum": 1, "maximum": 3600, "default": DEFAULT_ELASTIC_COOLDOWN,
            "description": "An elastic run's: how long a host on which a worker failed stays out before it may run "
                           "a worker again (Horovod's cooldown)."},
        "elastic_timeout_seconds": {
            "type": "integer", "minimum": 1, "maximum": 86400, "default": DEFAULT_ELASTIC_TIMEOUT,
            "description": "An elastic run's: how long Horovod's driver waits for min_ranks slots at the start and "
                           "after a failure before the run fails over to checkpoint and retry."},
        "slurm": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scratch_dir", "gpus_per_node"],
            "description": "The Slurm side, with scheduler: slurm.",
            "properties": {
                "scratch_dir": {
                    "type": "string",
                    "description": "Node-local directory, absolute or starting with a variable such as $TMPDIR "
                                   "(expanded inside the job): each training job stages the dataset into "
                                   "<scratch_dir>/hvdflow-<user>/job-<jobid>/ on every node, verifies it and removes "
                                   "it at the end."},
                "gpus_per_node": {"type": "integer", "minimum": 0,
                                  "description": "GPUs of one node, 0 for CPU nodes; a layout needing more per node "
                                                 "is refused before any job."},
                "gpu_type": {
                    "type": "string", "pattern": GPU_TYPE_PATTERN,
                    "description": "The GPU type the training jobs ask for where a partition's nodes have more than "
                                   "one (Slurm's GRES type: a100, h100): the jobs ask gpu:<type>:N and doctor counts "
                                   "that type only. Unset: gpu:N, any type."},
                "srun_extra": {"type": "array", "items": {"type": "string"},
                               "description": "Extra flags for the ranks' job steps."},
                "signal_grace_seconds": {
                    "type": "integer", "minimum": 0, "maximum": 65535, "default": DEFAULT_SIGNAL_GRACE,
                    "description": "Seconds before the time limit at which Slurm sends the training job SIGUSR1 "
                                   "(--signal=USR1@N): the ranks checkpoint and the job requeues itself. 0: no "
                                   "warning (the limit's SIGTERM still checkpoints, within KillWait)."},
            },
        },
    },
}
"""The schema of ``hvdflow.yaml``."""


def keys(section: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A section's required keys and its optional ones, in the schema's order."""
    required = tuple(section["required"])
    return required, tuple(k for k in section["properties"] if k not in required)
