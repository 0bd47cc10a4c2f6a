"""What every entry point shares: the --config flag, logging, and one-line errors."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from absl import app, flags, logging as absl_logging
from ml_collections import config_flags

from transformer_jax.errors import UserError

# Errors that mean bad input rather than a bug: reported in one line, exit status 2.
USER_ERRORS = (UserError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
               PermissionError, TimeoutError)


def define_config_flag(required: bool = True) -> Any:
    """``--config=configs/FILE.py[:VARIANT]`` with ``--config.FIELD=VALUE`` overrides."""
    holder = config_flags.DEFINE_config_file(
        "config", None, "Config file and variant, e.g. configs/table3.py:A_h4.")
    if required:
        flags.mark_flag_as_required("config")
    return holder


def define_workdir_flag(required: bool = True) -> Any:
    holder = flags.DEFINE_string("workdir", None,
                                 "Run directory: checkpoints, logs, vocabulary.")
    if required:
        flags.mark_flag_as_required("workdir")
    return holder


def no_extra_args(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")


def setup_logging() -> None:
    """Plain timestamped lines on stderr; the libraries' own chatter quieted."""
    absl_logging.use_python_logging()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr, force=True)
    for noisy in ("absl", "jax", "orbax", "etils", "tensorflow_datasets", "grain"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextlib.contextmanager
def clean_errors() -> Iterator[None]:
    """Turns a bad-input exception into one line on stderr and exit status 2.

    Set TRANSFORMER_JAX_TRACEBACK=1 to see the full traceback instead.
    """
    try:
        yield
    except USER_ERRORS as e:
        if os.environ.get("TRANSFORMER_JAX_TRACEBACK"):
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with every error (unknown config file, variant or field, a value
    of the wrong type) reported in one line naming it."""
    for arg in argv:
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1].split(":")[0]
            if not os.path.isfile(path):
                print(f"error: --config: no config file {path}", file=sys.stderr)
                sys.exit(2)
    try:
        return flags.FLAGS(argv)
    except Exception as e:  # noqa: BLE001 -- any parse failure is bad input here
        if os.environ.get("TRANSFORMER_JAX_TRACEBACK"):
            raise
        print(f"error: {_one_line(e, argv)}", file=sys.stderr)
        sys.exit(2)


def _one_line(e: BaseException, argv: list[str]) -> str:
    # A UserError raised by get_config (an unknown variant) arrives as traceback text.
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    for line in reversed(lines):
        match = re.match(r"transformer_jax\.errors\.\w+: (.*)", line)
        if match:
            return match.group(1)
    if isinstance(e, UserError):
        return str(e)
    if isinstance(e, KeyError | AttributeError):
        overrides = [a for a in argv if a.startswith("--config.")]
        field = str(e).strip("\"'")
        named = [a.split("=")[0][2:] for a in overrides if a.split("=")[0].endswith(field)]
        return f"unknown config field {named[0] if named else field}"
    if "Error whilst parsing config file" in str(e):
        return f"--config: {lines[-1]}"
    return lines[0] if lines else type(e).__name__


def run(main: Callable[[list[str]], None]) -> None:
    """``absl.app.run`` with one-line errors for bad flags and the project's logging."""
    setup_logging()
    app.run(main, flags_parser=_parse_flags)
