"""What to train and where: the config's datasets and experiments, and the cluster profile (``hvdflow.yaml``).

Validates what the JSON schema cannot (paths that must exist, keys per source, the profile's strict keys) and names
the file and key at fault. Imports :mod:`hvdflow.files`, the catalogue's names (:mod:`hvdflow.images.catalog`) and
the runtime door (:mod:`hvdflow.runtime`: the profile's ``runtime:`` section is checked by its kind);
never a launcher, Slurm or the pipeline.
"""
