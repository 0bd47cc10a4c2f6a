"""What every entry point shares: the --config flag, logging, and one-line errors."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from absl import app, flags, logging as absl_logging
from ml_collections import ConfigDict, config_flags

from transformer_jax.errors import TrainingStopped, UserError, WriteStalled, in_users_code, shown

# Errors that mean bad input rather than a bug: reported in one line, exit status 2 (a
# training run that stopped itself: its message, and the status of its reason).
USER_ERRORS = (UserError, FileNotFoundError, NotADirectoryError, IsADirectoryError,
               PermissionError, TimeoutError)


def define_config_flag(required: bool = True) -> Any:
    """``--config=configs/FILE.py[:VARIANT]`` with ``--config.FIELD=VALUE`` overrides."""
    # The config file, its overrides and any --flagfile are read as the flag is defined.
    with clean_errors((Exception,), lambda e: _one_line(e, sys.argv)):
        holder = config_flags.DEFINE_config_file(
            "config", None, "Config file and variant, e.g. configs/table3.py:A_h4.")
    if required:
        flags.mark_flag_as_required("config")
    return holder


def define_path_flag(name: str, help: str, required: bool = True,  # noqa: A002
                     default: str | None = None) -> Any:
    """A string flag naming a file or directory: given, it must not be empty (an empty
    --workdir= would otherwise mean the current directory) nor hold a NUL byte (which a
    --flagfile can carry, and no path can)."""
    holder = flags.DEFINE_string(name, default, help)
    flags.register_validator(name, lambda value: value is None or bool(value.strip()),
                             f"--{name} is empty; give a path")
    flags.register_validator(name, lambda value: value is None or "\0" not in value,
                             f"--{name} holds a NUL byte, which no path can")
    if required:
        flags.mark_flag_as_required(name)
    return holder


def define_workdir_flag(required: bool = True) -> Any:
    return define_path_flag("workdir", "Run directory: checkpoints, logs, vocabulary.",
                            required)


def define_overrides_flag(help: str = "Overrides of the workdir's config.json, e.g. "  # noqa: A002
                          "--config.decode.beam_size=8.") -> Any:
    """``--config.FIELD=VALUE`` overrides of the config a workdir was trained with (or of
    every point of a sweep).

    The flag is typed by the base config, so a misspelled field or a value of the wrong type
    is refused while parsing; :func:`workdir_config` applies the overrides.
    """
    from transformer_jax import config as config_lib

    # An unknown field (and any --flagfile) is read as the flag is defined.
    with clean_errors((Exception,), lambda e: _one_line(e, sys.argv)):
        _check_override_names(sys.argv)
        return config_flags.DEFINE_config_dict("config", config_lib.base_config(), help)


def override_values(config_flag: Any) -> dict[str, Any]:
    """The ``--config.FIELD=VALUE`` overrides given on the command line: {"FIELD": VALUE}."""
    return dict(flags.FLAGS[config_flag.name].override_values)


def flag_config(config_flag: Any) -> ConfigDict:
    """The ``--config`` flag's config with its ``--config.FIELD=VALUE`` overrides applied by
    :func:`transformer_jax.config.apply_overrides` (so that a new ``data.name`` brings that
    dataset's settings). An override of a field that selects defaults (config.SELECTORS:
    the variant, the scale) is refused: it is chosen in the config argument."""
    from transformer_jax import config as config_lib

    overrides = override_values(config_flag)
    # The flag's config holds the overrides already, so none of SELECTORS can be told
    # from the config file's own value: any is refused.
    for field in config_lib.SELECTORS.keys() & overrides.keys():
        raise config_lib.refuse_selector(field, overrides[field], "--config")
    c = config_flag.value
    if not isinstance(c, ConfigDict) or "model" not in c:
        path = config_flags.get_config_filename(flags.FLAGS[config_flag.name])
        raise UserError(f"--config={path}: get_config returned {type(c).__name__} "
                        f"{str(c)[:40]!r}, not the ConfigDict of an experiment "
                        "(config.from_arg builds one)")
    return config_lib.apply_overrides(c, overrides)


def no_extra_args(argv: list[str]) -> None:
    """Refuses arguments after the command's flags in one line, exit status 2 (absl's
    UsageError would print the usage text and exit 1)."""
    if len(argv) > 1:
        fail(f"unexpected arguments: {' '.join(argv[1:])} (this command takes flags only; "
             "a value with spaces needs quotes)")


def setup_logging() -> None:
    """Plain timestamped lines on stderr; the libraries' own chatter quieted."""
    # Quieted first: absl announces use_python_logging() at INFO when called again.
    # fsspec: a line at INFO each time a file in a bucket is opened for reading.
    for noisy in ("absl", "jax", "orbax", "etils", "tensorflow_datasets", "grain", "sacrebleu",
                  "fsspec"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    absl_logging.use_python_logging()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr, force=True)


def cpu_without_accelerators() -> None:
    """JAX on the CPU alone (its ``jax_platforms`` "cpu", in this process only) where JAX's GPU
    or TPU plugin is installed (the aot extra installs both) but the machine has no GPU and
    no TPU: the plugins would otherwise try to start a device that is not there and print
    their tracebacks (the CUDA plugin's "Unable to load cuDNN", libtpu's warnings) before JAX
    falls back to the CPU. A machine with a GPU or TPU keeps JAX's own choice, and so does one
    where JAX_PLATFORMS is set. Which devices the machine has is JAX's own test
    (``hardware_utils``, which it asks before starting CUDA)."""
    if "JAX_PLATFORMS" in os.environ or not (importlib.util.find_spec("jax_plugins")
                                             or importlib.util.find_spec("libtpu")):
        return
    import jax
    from jax._src import hardware_utils

    if (jax.config.jax_platforms or hardware_utils.has_visible_nvidia_gpu()
            or hardware_utils.num_available_tpu_chips_and_device_id()[0]
            or hardware_utils.num_available_amd_gpus(stop_at=1)):
        return
    jax.config.update("jax_platforms", "cpu")


def fail(message: str) -> NoReturn:
    """Ends the command with ``error: message`` on stderr and exit status 2 (bad input); the
    message is kept to one line (errors.shown)."""
    print(f"error: {shown(message)}", file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def clean_errors(errors: tuple[type[BaseException], ...] = USER_ERRORS,
                 describe: Callable[[BaseException], str] = str) -> Iterator[None]:
    """Turns one of ``errors`` (by default the bad-input ones) into one line on stderr,
    ``describe(error)``, and exit status 2; a TrainingStopped into its message and its exit
    status (errors.STOP_EXIT_STATUS).

    A WriteStalled ends the process at once after its line (os._exit): the thread blocked in
    the write could never be joined at the interpreter's exit. An OSError for want of space
    (ENOSPC, EDQUOT) that no writer named is one line too.

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
        if isinstance(e, WriteStalled):
            print(f"error: {shown(describe(e))}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(2)
        fail(describe(e))
    except OSError as e:
        from transformer_jax.io.storage import NO_SPACE

        if e.errno not in NO_SPACE or os.environ.get("TRANSFORMER_JAX_TRACEBACK"):
            raise
        fail(f"{e.filename or 'a write'}: {e.strerror} (free some space and run the same "
             "command again)")


def _parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with every error (unknown config file, variant or field, a value
    of the wrong type) reported in one line naming it."""
    for arg in argv:
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1].split(":")[0]
            if not os.path.isfile(path):
                fail(f"--config: no config file {path}")
    # Any parse failure is bad input here. ml_collections warns through absl's logger about
    # a get_config returning None, which is then refused in one line.
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        with clean_errors((Exception,), lambda e: _one_line(e, argv)):
            if "config" in flags.FLAGS:
                _check_override_names(argv)
            return flags.FLAGS(argv)
    finally:
        absl_logger.setLevel(level)


def _check_override_names(argv: list[str]) -> None:
    """Refuses a ``--config.FIELD`` no config can have (config.check_name: ``--config.``,
    ``--config.variant.x``) in one line naming it, before ml_collections reads it (which
    would answer "Could not parse ''" or "string indices must be integers"). The overrides
    are found as ml_collections finds them, in the flag files too."""
    from transformer_jax import config as config_lib

    schema = config_lib.base_config()
    for arg in flags.FLAGS.read_flags_from_files(argv[1:], force_gnu=False):
        if re.match(r"-{1,2}(no)?config\.", arg):
            config_lib.check_name(schema, arg.split("=", 1)[0].split(".", 1)[1])


def _one_line(e: BaseException, argv: list[str]) -> str:
    # A UserError raised by get_config (an unknown variant) arrives as traceback text.
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    for line in reversed(lines):
        match = re.match(r"transformer_jax\.errors\.\w+: (.*)", line)
        if match:
            return match.group(1)
    if isinstance(e, UserError):
        return str(e)
    if isinstance(e, flags.CantOpenFlagFileError):
        return f"--flagfile: {lines[-1].removeprefix('ERROR:: ') if lines else e}"
    if isinstance(e, ValueError) and "null byte" in str(e):  # a --flagfile naming such a path
        return "--flagfile: a path holds a NUL byte, which no path can"
    in_file = _config_file_line(e, argv)
    if in_file:
        return in_file
    if "Flag --config must have a value other than None" in str(e):
        path = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "")
        return f"--config={path}: get_config returned None, not a config"
    if isinstance(e, KeyError | AttributeError):
        overrides = [a for a in argv if a.startswith("--config.")]
        field = str(e).strip("\"'")
        named = [a.split("=")[0][2:] for a in overrides if a.split("=")[0].endswith(field)]
        return f"unknown config field {named[0] if named else field}"
    if "Error whilst parsing config file" in str(e):
        return f"--config: {lines[-1]}"
    return lines[0] if lines else type(e).__name__


def _config_file_line(e: BaseException, argv: list[str]) -> str:
    """"--config=FILE line N: ERROR" when ``e`` was raised in the code of the config file
    named by ``argv`` (a syntax error in it, or an exception of its get_config); else ""."""
    path = next((a.split("=", 1)[1].split(":")[0] for a in argv if a.startswith("--config=")),
                "")
    where = in_users_code(e, path) if path else ""
    return f"--config={path} {where}" if where else ""


def run(main: Callable[[list[str]], None]) -> None:
    """``absl.app.run`` with one-line errors for bad flags and the project's logging (set up
    once absl has started, which installs its own handler)."""

    def with_logging(argv: list[str]) -> None:
        setup_logging()
        cpu_without_accelerators()
        main(argv)

    app.run(with_logging, flags_parser=_parse_flags)
