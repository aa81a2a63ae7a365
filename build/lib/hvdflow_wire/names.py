"""The names both sides of the seam spell, defined once: the trainer's ``--model``, ``--framework`` and
``--distributed`` take them on the command line the host writes (the config's JSON schema lists them too, for the
user; a test compares it with these)."""

BUILT_IN_MODELS = ("mlp", "small-cnn", "resnet50")
"""The models the trainer builds by name, in either framework."""
FRAMEWORKS = ("tensorflow", "pytorch")
"""The frameworks an experiment trains with (the trainer's registry, ``hvdflow_trainer.frameworks``, has one folder
each)."""
USER_MODEL = "user"
"""The trainer's ``--model`` (and the benchmark's ``--kind``) for a user's own model (its ``--model-*`` options name
it)."""
DISTRIBUTED = ("horovod", "ddp")
"""The distributed modes, the default first: Horovod's API, or PyTorch's DistributedDataParallel."""
