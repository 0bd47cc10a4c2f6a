"""Errors that mean bad input, not a bug: entry points report them in one line."""


class UserError(ValueError):
    """Bad input from the user; the message names the field, file or line."""


class ConfigError(UserError):
    """An invalid configuration; the message names the field and the allowed values."""


class DataError(UserError):
    """Unusable data; the message names the file and line."""


class TrainingStopped(UserError):
    """Training stopped to protect the run (non-finite values); the message names the step
    and the last good checkpoint."""
