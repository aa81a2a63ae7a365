"""What to train and where: the config's datasets and experiments, and the cluster profile (``hvdflow.yaml``).

Validates what the JSON schema cannot (paths that must exist, keys per source, the profile's strict keys) and names
the file and key at fault. Imports :mod:`hvdflow.files` and the catalogue's names (:mod:`hvdflow.images.catalog`);
never a launcher, Slurm or the pipeline.
"""
