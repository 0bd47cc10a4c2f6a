"""orbax's log records kept out of the one-line reports: the traceback its writer threads log
for a save that failed (:class:`SaveErrors`, which keeps the exception for the report). The
warnings about each file a damaged checkpoint lacks are dropped by io/quiet.py."""

from __future__ import annotations

import logging


class SaveErrors(logging.Filter):
    """Drops orbax's error records (a failed save's traceback, logged by its writer threads)
    and keeps their exceptions for :meth:`take`."""

    def __init__(self) -> None:
        super().__init__()
        self._errors: list[BaseException] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or "orbax" not in record.pathname:
            return True
        self._errors.append(record.exc_info[1] if record.exc_info and record.exc_info[1]
                            else RuntimeError(record.getMessage()))
        return False

    def take(self) -> list[BaseException]:
        errors, self._errors = self._errors, []
        return errors
