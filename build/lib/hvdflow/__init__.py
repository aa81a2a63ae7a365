"""hvdflow, the host side: images, launchers and run records for containerised Horovod training on HPC clusters.

The rooms, from the bottom floor up (a module imports only from its own floor or the floors below):

- ``errors`` and :mod:`hvdflow.files`: error types; atomic writes, hashes and cache keys, file locks, YAML loading.
- :mod:`hvdflow.config`: the user's config (datasets, experiments) and the cluster profile, validated.
- :mod:`hvdflow.images`: the catalogue, recipes and the offline image builder, the registry client, the lock of
  digests, udocker and its engine tools, and the pull that ties them together.
- :mod:`hvdflow.launch`: runtimes (udocker or a native venv), process supervision, Horovod's rank environment and
  rendezvous server, and the local launchers (Gloo, MPI).
- :mod:`hvdflow.slurm`: Horovod ranks across the nodes of a Slurm job: job layout, Slurm's task variables,
  node-local staging, the per-task rank program, and the srun/mpirun launch.
- :mod:`hvdflow.pipeline`: the stages the rules run, the rule bodies, the run record, plots and the smoke job.
- :mod:`hvdflow.testbed`: a real Slurm cluster and a registry on this machine, for tests and demos only; nothing
  else imports it.
- ``cli``: the ``hvdflow`` command.

A training goes down the floors once and never back up: the rule ``train`` calls
:func:`hvdflow.pipeline.steps.train_rule` → :func:`hvdflow.pipeline.stages.train` →
:func:`hvdflow.pipeline.dispatch.launch`, which chooses, in one place, a local launcher (:mod:`hvdflow.launch.local`,
:mod:`hvdflow.launch.elastic`) or a Slurm launcher (:mod:`hvdflow.slurm.launch`: a staging step →
``srun python -m hvdflow.slurm.rank_task`` per rank → a clean-up step); each hands the runtime's
command to :mod:`hvdflow.launch.supervise`, which starts and stops the processes.

The seam: nothing here imports TensorFlow or Horovod, nor the in-container package ``hvdflow_trainer``, which runs
in the containers (bind-mounted) and never imports ``hvdflow``. What both sides read lives in three small
standard-library packages: ``hvdflow_index`` (the prepared dataset's index and the gather that writes it),
``hvdflow_runstate`` (a run's checkpoint manifest and identity, which the trainer writes and the host checks before
it resumes a run: :mod:`hvdflow.pipeline.resume`) and ``hvdflow_wire`` (every file passed between processes: the
rank task's file, the rank result, an elastic run's files).
"""

__version__ = "0.1.0"
