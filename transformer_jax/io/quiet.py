"""The libraries' log records that are not the user's business, dropped where they are
expected and nowhere else: never by raising a log level, so their other warnings still show.

orbax and TFDS log through absl's logger ("absl"); :class:`Dropped` filters it while
entered, around the one call that makes the record.
"""

from __future__ import annotations

import logging


class Dropped(logging.Filter):
    """While entered, drops the absl log records whose message contains one of ``texts``,
    or, with no ``texts``, every warning."""

    def __init__(self, *texts: str):
        super().__init__()
        self.texts = texts

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.texts:
            return record.levelno != logging.WARNING
        message = record.getMessage()
        return not any(text in message for text in self.texts)

    def __enter__(self) -> Dropped:
        logging.getLogger("absl").addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("absl").removeFilter(self)
