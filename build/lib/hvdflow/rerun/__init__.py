"""Floor 6, reruns: a recorded training (its ``run.json``) run again with the recorded code revision (a git
worktree), config, profile settings, image digest and prepared dataset, then compared with its record row by row.

It may import every floor below (it runs the recorded revision's Snakemake workflow, which pulls and trains); only
``cli`` imports it.
"""
