"""Exceptions hvdflow raises for problems a user can fix; each message names the file, key, image or rank."""


class HvdflowError(Exception):
    """Base of every error hvdflow reports to the user without a traceback."""


class ConfigError(HvdflowError):
    """A catalogue, recipe, config or profile is invalid."""


class RegistryError(HvdflowError):
    """The registry is unreachable or does not have what was asked for."""


class RegistryUnreachable(RegistryError):
    """The registry did not answer at all (refused, no route, timed out), as opposed to answering with an error."""


class ImageError(HvdflowError):
    """An image failed verification, changed under its lock, or could not be turned into a container."""


class UdockerError(HvdflowError):
    """udocker failed or was asked to do something hvdflow refuses (running as root)."""


class LaunchError(HvdflowError):
    """A training rank or the rendezvous server failed."""


class RunStopped(LaunchError):
    """The ranks stopped together on a signal after rank 0 saved a checkpoint: the run resumes when started again."""


class DatasetError(HvdflowError):
    """A dataset cannot be prepared, or a prepared one is incomplete."""


class RerunRefused(HvdflowError):
    """A recorded run cannot be rerun as recorded: its code, image or inputs are not what the record names."""
