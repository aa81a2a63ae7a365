"""The files one process of a training writes and another reads, defined once for both sides of the seam.

Each file is a typed value (a frozen dataclass) with one writer and one reader, and the reader validates what it
reads: a missing key, a key of the wrong type, an unknown key or text that is not JSON is a :class:`WireError` that
names the file (and, for JSON lines, the line), never data.

- :mod:`.names`: the names both sides spell on the trainer's command line (the built-in models, the frameworks,
  the distributed modes).
- :mod:`.task` (``task.json``, ``task-<worker>.json``): what a Slurm rank task runs, written by the Slurm launcher,
  read by ``hvdflow.slurm.rank_task`` on the rank's node.
- :mod:`.rank` (``rank-<r>.json``): a rank's result, written by the trainer after its last epoch, read by the
  pipeline (the check of the results, the run record, the smoke job) and the elastic launcher.
- :mod:`.metrics` (``metrics.json``): a training's metrics, written by rank 0 of the trainer, read by the smoke
  job and the benchmarks.
- :mod:`.evaluation` (``evaluation.json``): a trained model's test-set scores, written by the trainer's evaluate
  step, read by the report's figures.
- :mod:`.model_check` (``model-check.json``): what the check of a user's model found, written by the trainer's
  check_model step, read by the host's rule that ran it.
- :mod:`.slurm`: between the Slurm launcher and its rank tasks, in the run's log directory: ``rendezvous.json``
  (the Gloo rendezvous server's address, launcher → rank tasks) and the rank task's ``rank-<r>.failed.json`` and
  ``rank-<r>.stopped.json`` (rank task → launcher).
- :mod:`.staging` (``staging/task-<rank>.json``): what srun told each task of the staging job step, written by the
  task, read by the Slurm launcher (the MPI mode's allocation) and the run record.
- :mod:`.elastic`: the files of an elastic run, between the launcher on the host, Horovod's driver in the image and
  rank 0 of the trainer: ``hosts.json``, ``requests.jsonl``, ``exits.jsonl``, ``result.json``,
  ``membership.jsonl``, and the launcher's own ``events.jsonl``.
- :mod:`.user_code`: the last line of a trainer process that the user's own code stopped (trainer → host steps).
- :mod:`.lines`: appending and reading JSON lines (a line still being written is not read until it is complete).
- :mod:`.values`: the checks every reader shares; :mod:`.replace`: the atomic write every writer shares.

Standard library only, Python 3.8 grammar; imports neither ``hvdflow`` nor ``hvdflow_trainer``.
"""

from .values import WireError

__all__ = ["WireError"]
