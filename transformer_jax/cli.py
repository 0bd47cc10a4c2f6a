"""What every entry point shares: the --config flag, logging, and one-line errors."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from absl import app, flags, logging as absl_logging
from ml_collections import ConfigDict, config_flags

from transformer_jax.errors import TrainingStopped, UserError

# Errors that mean bad input rather than a bug: reported in one line, exit status 2 (a
# training run that stopped itself: its message, and the status of its reason).
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


def define_overrides_flag() -> Any:
    """``--config.FIELD=VALUE`` overrides of the config a workdir was trained with.

    The flag is typed by the base config, so a misspelled field or a value of the wrong type
    is refused while parsing; :func:`workdir_config` applies the overrides.
    """
    from transformer_jax import config as config_lib

    # An unknown field is found as the flag is defined.
    with clean_errors((KeyError, AttributeError), lambda e: _one_line(e, sys.argv)):
        return config_flags.DEFINE_config_dict(
            "config", config_lib.base_config(),
            "Overrides of the workdir's config.json, e.g. --config.decode.beam_size=8.")


def override_values(config_flag: Any) -> dict[str, Any]:
    """The ``--config.FIELD=VALUE`` overrides given on the command line: {"FIELD": VALUE}."""
    return dict(flags.FLAGS[config_flag.name].override_values)


def flag_config(config_flag: Any) -> ConfigDict:
    """The ``--config`` flag's config with its ``--config.FIELD=VALUE`` overrides applied by
    :func:`transformer_jax.config.apply_overrides` (so that a new ``data.name`` brings that
    dataset's settings)."""
    from transformer_jax import config as config_lib

    return config_lib.apply_overrides(config_flag.value, override_values(config_flag))


def no_extra_args(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")


def setup_logging() -> None:
    """Plain timestamped lines on stderr; the libraries' own chatter quieted."""
    # Quieted first: absl announces use_python_logging() at INFO when called again.
    for noisy in ("absl", "jax", "orbax", "etils", "tensorflow_datasets", "grain", "sacrebleu"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    absl_logging.use_python_logging()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr, force=True)


def fail(message: str) -> NoReturn:
    """Ends the command with ``error: message`` on stderr and exit status 2 (bad input)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def clean_errors(errors: tuple[type[BaseException], ...] = USER_ERRORS,
                 describe: Callable[[BaseException], str] = str) -> Iterator[None]:
    """Turns one of ``errors`` (by default the bad-input ones) into one line on stderr,
    ``describe(error)``, and exit status 2; a TrainingStopped into its message and its exit
    status (errors.STOP_EXIT_STATUS).

    Set TRANSFORMER_JAX_TRACEBACK=1 to see the full traceback instead.
    """
    try:
        yield
    except errors as e:
        if os.environ.get("TRANSFORMER_JAX_TRACEBACK"):
            raise
        if isinstance(e, TrainingStopped):
            print(str(e), file=sys.stderr)
            sys.exit(e.exit_status)
        fail(describe(e))


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with every error (unknown config file, variant or field, a value
    of the wrong type) reported in one line naming it."""
    for arg in argv:
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1].split(":")[0]
            if not os.path.isfile(path):
                fail(f"--config: no config file {path}")
    # Any parse failure is bad input here.
    with clean_errors((Exception,), lambda e: _one_line(e, argv)):
        return flags.FLAGS(argv)


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
    """``absl.app.run`` with one-line errors for bad flags and the project's logging (set up
    once absl has started, which installs its own handler)."""

    def with_logging(argv: list[str]) -> None:
        setup_logging()
        main(argv)

    app.run(with_logging, flags_parser=_parse_flags)
