"""The top floor: the stages the Snakemake rules run (``stages``), the rule bodies (``steps``), the run record,
plots, and the smoke job. It picks the launcher (local or Slurm) once per training; nothing below imports it.
"""
