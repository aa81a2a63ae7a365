"""Starting Horovod ranks: process supervision, the rank environment and rendezvous server of a Gloo launch, and
the local launchers (Gloo, host ``mpirun``), each running its ranks in the runtime it is given.

Imports :mod:`hvdflow.runtime` (the runtime door), :mod:`hvdflow.images`, :mod:`hvdflow.config` and
:mod:`hvdflow.files`; never Slurm or the pipeline, which call down into it.
"""
