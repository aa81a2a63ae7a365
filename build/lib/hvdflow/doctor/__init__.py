"""``hvdflow doctor``: what a user runs first on a new cluster, and what a support ticket should include.

Each check gives one finding (ok, warning or failure, with the fix in one sentence): on the login node
(:mod:`~hvdflow.doctor.host`: Python and hvdflow's dependencies, udocker and its directory, proot's seccomp
acceleration, user namespaces, the registry and each locked digest, Open MPI for ``launcher: mpi``), against Slurm's
controller (:mod:`~hvdflow.doctor.slurm_checks`: the client, the profile's partition, time limit, GRES and account), and
on a compute node through one short Slurm job (:mod:`~hvdflow.doctor.node`: GPUs, node-local scratch, the udocker
directory seen from the node, the network interface). :mod:`~hvdflow.doctor.run` makes them in order. Floor 6: it
reads profiles, catalogue and lock (floors 1-2) and Slurm's job layout (floor 4); nothing imports it but the cli.
"""
