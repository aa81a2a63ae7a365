"""Horovod ranks across the nodes of one Slurm job: the job layout the rules ask for, Slurm's task variables mapped
to Horovod's, node-local staging of the dataset, the per-task rank program, and the srun/mpirun launch.

Its modules ``staging`` and ``rank_task`` also run as job steps (``python -m``). Imports :mod:`hvdflow.launch`,
:mod:`hvdflow.config`, :mod:`hvdflow.images` and :mod:`hvdflow.files`; never the pipeline.
"""
