"""Starting Horovod ranks: the runtimes (a udocker container or a native venv), process supervision, the rank
environment and rendezvous server of a Gloo launch, and the local launchers (Gloo, host ``mpirun``).

Imports :mod:`hvdflow.images` (udocker, for the runtime and the native venv), :mod:`hvdflow.config` and
:mod:`hvdflow.files`; never Slurm or the pipeline, which call down into it.
"""
