"""Errors that mean bad input, not a bug: entry points report them in one line."""


class UserError(ValueError):
    """Bad input from the user; the message names the field, file or line."""


class ConfigError(UserError):
    """An invalid configuration; the message names the field and the allowed values."""


class DataError(UserError):
    """Unusable data; the message names the file and line."""


# The exit status of a training run that stopped itself (training/stops.py), by the reason
# its final_metrics.json records; bad input is 2.
STOP_EXIT_STATUS = {"diverged": 3, "pruned": 4}


class TrainingStopped(UserError):
    """Training stopped itself: it diverged (non-finite steps, a loss far above its best) or
    its Optuna trial was pruned. The message names the step and why; ``reason`` is a key of
    STOP_EXIT_STATUS, the command's exit status."""

    def __init__(self, message: str, reason: str = "diverged", step: int | None = None):
        super().__init__(message)
        self.reason, self.step = reason, step

    @property
    def exit_status(self) -> int:
        return STOP_EXIT_STATUS[self.reason]
