"""Errors that mean bad input, not a bug: entry points report them in one line."""

import os
import re

# Characters that would break a message's one line (or hide part of it): control characters,
# the Unicode line and paragraph separators, and the direction overrides.
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def in_users_code(e: BaseException, path: str) -> str:
    """"line N: TYPE: MESSAGE" when ``e`` was raised by the code of the user's Python file
    ``path`` (a config or experiment file: a syntax error in it, or an exception it raised;
    N is the innermost line of that file), else ""."""
    where = os.path.realpath(path)
    line = None
    if isinstance(e, SyntaxError) and e.filename and os.path.realpath(e.filename) == where:
        line = e.lineno
    elif isinstance(e, SyntaxError) and "null bytes" in str(e):  # said of no file or line
        line = _first_nul_line(where)
    tb = e.__traceback__
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) == where:
            line = tb.tb_lineno
        tb = tb.tb_next
    if line is None:
        return ""
    what = e.msg if isinstance(e, SyntaxError) else (str(e).strip().splitlines() or [""])[0]
    if "null bytes" in str(e):
        what = "not Python (it holds NUL bytes)"
    return shown(f"line {line}: {type(e).__name__}: {what}"[:400])


def _first_nul_line(path: str) -> int | None:
    """The line of ``path``'s first NUL byte (Python refuses such a file as a whole), or None
    when it holds none or cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data.count(b"\n", 0, data.index(b"\0")) + 1 if b"\0" in data else None


def shown(text: str) -> str:
    """``text`` as a message quotes what the user gave: its control characters (a newline, a
    NUL) written as escapes, so that the message stays one line."""
    return _UNSHOWN.sub(lambda m: repr(m.group())[1:-1], text)


class UserError(ValueError):
    """Bad input from the user; the message names the field, file or line."""


class ConfigError(UserError):
    """An invalid configuration; the message names the field and the allowed values."""


class DataError(UserError):
    """Unusable data; the message names the file and line."""


# The exit status of a training run that stopped itself (training/stops.py), by the reason
# its final_metrics.json records; bad input is 2.
STOP_EXIT_STATUS = {"diverged": 3, "pruned": 4}
# The exit status of a process of a multi-process run that ended because the run failed,
# in it or in another process (a process killed: the others' collectives break).
FAILED_PROCESS_EXIT_STATUS = 5


class DiskFull(UserError):
    """A write failed for want of space (ENOSPC, or a quota: EDQUOT); the message names the
    path, and nothing half-written is left there (io/storage.py)."""


class WriteStalled(UserError):
    """A write (a checkpoint, a log) did not return within ``train.write_timeout_s``, or a
    stop signal came while it hung. The thread blocked in it cannot be ended, so the command
    reports the message and ends the process at once (cli.clean_errors) rather than wait for
    it at the interpreter's exit."""


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
