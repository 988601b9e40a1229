"""User-facing errors.

Every error a user can cause (a bad config key, a missing column, a reward function
that raises) is an :class:`EvotuneError`. The CLI prints its message as one paragraph
and exits with status 2, without a traceback; the message always says what to do.
"""


class EvotuneError(Exception):
    """An error caused by input the user can fix; the message names the fix."""


class ConfigError(EvotuneError):
    """A config key or value is wrong."""


class DataError(EvotuneError):
    """A dataset is missing, empty, or lacks a required column."""


class RewardFunctionError(EvotuneError):
    """A reward function raised, or returned something that is not a list of finite floats."""


class ModelLoadError(EvotuneError):
    """A model could not be found or loaded."""


class OutputError(EvotuneError):
    """The run's files could not be written (disk full, a read-only or missing directory)."""


class CheckpointError(EvotuneError):
    """A checkpoint is missing files, fails its checksum, or holds something other than evotune's state."""


class OutOfMemoryError(EvotuneError):
    """Generation does not fit in the device's memory even one candidate at a time."""
