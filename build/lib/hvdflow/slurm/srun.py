"""Every command line that starts a job step of a Slurm training: pure functions of the cluster, the layout and the
paths, so that each is tested against a golden file (``tests/golden/<profile>.steps.txt``).

- :func:`staging_step`: the training's layout, each node's first task stages the dataset (:mod:`hvdflow.slurm.staging`);
- :func:`ranks_step`: one rank task per rank in the job's layout (Gloo), :func:`rank_program` in each;
- :func:`mpirun_ranks`: the host's mpirun starting the rank tasks through Slurm (MPI);
- :func:`worker_step`: one elastic worker, a one-task step on one node (:mod:`hvdflow.slurm.elastic`);
- :func:`cleanup_step`: one task per node removing the job's scratch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hvdflow.config.profile import SlurmCluster
from hvdflow.slurm.layout import even_tasks_per_node, gpus_per_node_needed, max_tasks_per_node


def python_module(python: str, module: str, *args: str) -> list[str]:
    """``python -m module args``: a job step's program, run by the host's interpreter ``python``."""
    return [python, "-m", module, *args]


def rank_program(python: str, task_file: Path) -> list[str]:
    """The rank task (:mod:`hvdflow.slurm.rank_task`) that runs one rank of the launch ``task_file`` describes."""
    return python_module(python, "hvdflow.slurm.rank_task", str(task_file))


def ranks_step(cluster: SlurmCluster, ranks: int, nodes: int, program: Sequence[str], cpus_per_task: int) -> list[str]:
    """The job step that runs ``program`` once per rank over ``nodes`` nodes, in the job's layout, each task with
    ``cpus_per_task`` CPUs bound as the cluster's ``cpu_bind`` says (srun no longer takes the job's --cpus-per-task
    on its own since Slurm 22.05)."""
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={ranks}"]
    # the job's layout: even, or at most ceil(ranks / nodes) per node (a maximum beside --ntasks)
    argv.append(f"--ntasks-per-node={even_tasks_per_node(ranks, nodes) or max_tasks_per_node(ranks, nodes)}")
    argv += [f"--cpus-per-task={cpus_per_task}", f"--cpu-bind={cluster.cpu_bind}", "--kill-on-bad-exit=1", "--overlap"]
    gpus = gpus_per_node_needed(ranks, nodes, cluster)
    if gpus:
        argv.append(f"--gres={cluster.gpu_gres(gpus)}")
    return argv + list(cluster.srun_extra) + list(program)


def staging_step(cluster: SlurmCluster, ranks: int, nodes: int, cpus_per_task: int, python: str, dataset: str,
                 staged: Path, reports: Path, live_jobs: str) -> list[str]:
    """The staging step, in the training's layout: ``dataset`` (or :data:`~hvdflow.slurm.staging.NO_DATASET`) copied
    to ``staged`` on each node, the reports in ``reports``, the scratch of jobs not in ``live_jobs`` swept."""
    program = python_module(python, "hvdflow.slurm.staging", "stage", dataset, str(staged), str(reports), live_jobs)
    return ranks_step(cluster, ranks, nodes, program, cpus_per_task)


def mpirun_ranks(ranks: int, program: Sequence[str]) -> list[str]:
    """The host's mpirun starting ``program`` (the rank task) ``ranks`` times through Slurm (``plm/slurm``)."""
    return ["mpirun", "-np", str(ranks), "--bind-to", "none", "--mca", "plm", "slurm", "--mca", "ras", "slurm",
            "--mca", "btl", "self,tcp", *program]


def worker_step(cluster: SlurmCluster, node: str, cpus_per_task: int, program: Sequence[str]) -> list[str]:
    """One elastic worker: a one-task step on ``node`` that outlives the failure of others (one GPU where the cluster
    has GPUs)."""
    gpus = [f"--gres={cluster.gpu_gres(1)}"] if cluster.gpus_per_node > 0 else []
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", f"--cpus-per-task={cpus_per_task}",
            f"--cpu-bind={cluster.cpu_bind}", "--overlap", "--kill-on-bad-exit=0", *gpus, *cluster.srun_extra,
            *program]


def cleanup_step(nodes: int, job_dir: Path, python: str) -> list[str]:
    """One task on each of ``nodes`` nodes removing ``job_dir`` from its scratch."""
    return ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--overlap",
            *python_module(python, "hvdflow.slurm.staging", "clean", str(job_dir))]
