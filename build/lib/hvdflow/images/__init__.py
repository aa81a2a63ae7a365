"""Container images: the catalogue, recipes and the offline builder (``build``), the registry client, the lock of
pinned digests, the udocker wrapper and its engine tools, and the pull that verifies and creates a container once.

Imports :mod:`hvdflow.files` only; never config, launchers, Slurm or the pipeline.
"""
