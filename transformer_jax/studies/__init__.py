"""Optuna studies as training and the sweeps' search controller both open them: where a study
is stored, and which way its objective goes.

``search.storage`` (and a sweep's ``--storage``) is either a database URL, any SQLAlchemy URL
(``sqlite:///study.db``, ``postgresql+psycopg2://user@host/db``: optuna's RDBStorage, whose
transactions make a claim atomic), or the path of a journal file (optuna's JournalStorage on a
JournalFileBackend: one file of appended operations, locked for writers, whose order decides a
race). :func:`is_database` is the one test of which it is. A journal file needs a file system
that locks; a bucket does not, so a ``gs://`` journal is refused in one line that asks for a
database.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from transformer_jax.errors import UserError
from transformer_jax.io import metric_keys, storage

# Attempts at opening a database, a second apart: controllers started at once on a new one
# race to create its tables, and all but one fail once.
OPEN_ATTEMPTS = 3
# SQLAlchemy's URL form: dialect[+driver]://...
_DATABASE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9_]+)?://")


def is_database(url_or_path: str) -> bool:
    """Whether ``url_or_path`` names a database (a SQLAlchemy URL) rather than a journal
    file; a bucket path (``gs://...``) is a file's path, not a database."""
    text = str(url_or_path)
    return bool(_DATABASE.match(text)) and not storage.is_remote(text)


def bucket_journal(url_or_path: str) -> str:
    """The one line refusing a journal file in a bucket ("" for anything else)."""
    if is_database(url_or_path) or not storage.is_remote(str(url_or_path)):
        return ""
    return (f"{url_or_path}: an Optuna journal file needs a file system that locks, and a "
            "bucket does not; keep the study in a database: --storage=postgresql+psycopg2://"
            "USER@HOST/DB (or search.storage=...)")


def open_storage(url_or_path: str) -> Any:
    """The Optuna storage ``url_or_path`` names (see the module's docstring). UserError in
    one line for a journal file in a bucket, or an unreachable or wrong database (after
    OPEN_ATTEMPTS)."""
    import optuna

    refused = bucket_journal(url_or_path)
    if refused:
        raise UserError(refused)
    if not is_database(url_or_path):
        return _journal(str(url_or_path))
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url_or_path)
        except Exception as e:  # sqlalchemy's errors for a bad URL or an unreachable server
            if attempt + 1 == OPEN_ATTEMPTS:
                raise UserError(f"search.storage={url_or_path!r}: {type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else e}") from e
            time.sleep(1.0)
    raise AssertionError("unreachable")


def _journal(path: str) -> Any:
    """Optuna's JournalStorage of the file ``path`` (made when missing); UserError naming
    the file for one that is not a regular file (a named pipe would be waited on) or whose
    operations Optuna cannot replay (an edited or damaged journal)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend

    why = storage.not_a_file(path)
    if why and why != "no such file":
        raise UserError(f"{path}: {why}, not an Optuna journal file")
    try:
        journal = optuna.storages.JournalStorage(_whole_appends(JournalFileBackend)(path))
        for study in journal.get_all_studies():
            if not isinstance(study.study_name, str):  # Optuna replays any JSON value
                raise TypeError(f"a study named {study.study_name!r}, not a string")
            if len(study.directions) != 1:
                raise TypeError(f"study {study.study_name!r} of {len(study.directions)} "
                                "objectives, not one")
            for trial in journal.get_all_trials(study._study_id, deepcopy=False):
                _check_told(trial)
        return journal
    except OSError:
        raise  # the file system's (permissions, a full disk): the command names them
    except Exception as e:  # noqa: BLE001
        # Optuna replays every line as it opens the journal: a line that is not JSON fails
        # as a ValueError, a wrong operation as a KeyError, TypeError or AssertionError.
        raise UserError(f"{path}: not an Optuna journal of a study (damaged or edited: "
                        f"{type(e).__name__}: {str(e)[:80]})") from None


def _whole_appends(backend: type) -> type:
    """Optuna's JournalFileBackend (``backend``) whose appends are written whole or not at
    all (storage.LineLog): one refused for want of space is cut off the file again and
    raised as DiskFull naming it. Optuna's own leaves the part that fit, which the next
    append runs into: a line that does not replay, and the study could not be opened again.
    The lock is Optuna's, taken as its own append takes it."""

    class WholeAppends(backend):  # type: ignore[misc,valid-type]
        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
            self._lock.acquire()
            try:
                with storage.LineLog(self._file_path) as journal:
                    journal.write(text)
                    journal.sync()
            finally:
                self._lock.release()

    return WholeAppends


def _check_told(trial: Any) -> None:
    """TypeError unless the values told to ``trial`` are what a search tells: one number,
    and one for a trial complete (Optuna replays any JSON value there)."""
    import optuna

    values = trial.values
    one_number = isinstance(values, list) and len(values) == 1 and isinstance(
        values[0], int | float) and not isinstance(values[0], bool)
    if not one_number and (values is not None or trial.state == optuna.trial.TrialState.COMPLETE):
        raise TypeError(f"trial {trial.number} ({trial.state.name}) told "
                        f"{str(values)[:40]!r}, not one number")


def direction(objective: str) -> str:
    """The direction of a study over ``objective`` (a metric_keys.OBJECTIVES key):
    "maximize" for those better higher (BLEU), else "minimize"."""
    return "maximize" if objective in metric_keys.HIGHER_IS_BETTER else "minimize"
