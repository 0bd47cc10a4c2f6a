"""orbax's log records, kept out of the one-line reports: the warnings about each file a
damaged checkpoint lacks (:class:`DropMessages`), and the traceback its writer threads log
for a save that failed (:class:`SaveErrors`, which keeps the exception for the report)."""

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


class DropMessages(logging.Filter):
    """While entered, drops the absl log records (orbax logs through absl) that contain
    ``text``, or, when ``text`` is None, every warning."""

    def __init__(self, text: str | None = None):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        if self.text is None:
            return record.levelno != logging.WARNING
        return self.text not in record.getMessage()

    def __enter__(self) -> DropMessages:
        logging.getLogger("absl").addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("absl").removeFilter(self)
