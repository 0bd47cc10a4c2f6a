"""What every property of the fuzz suite shares: its Hypothesis profiles, the one property
(accepted with a consistent result, or refused in one line naming the field or file), the
watchdog that turns a hang into a failure, and the tally of what the inputs did.

The profiles, chosen by the environment variable FUZZ_PROFILE:

* ``fuzz`` (the default, ``make test``): a few examples a property, seconds in all; where
  ``CI`` is set, Hypothesis's ci profile draws the same examples on every run;
* ``fuzz-ci`` (the slow suite, tests/fuzz/test_many_examples.py): ten times as many;
* ``fuzz-long`` (``python experiments/benchmarks/fuzz_long_run.py``, the figure of
  docs/faults.md): fifty times as many.

The last two draw new examples on every run, in CI too, from a seed they print
(:func:`run_seed`): ``FUZZ_SEED=N`` draws run N's again.

A property takes ``examples(n)`` examples, ``n`` those of its kind under ``fuzz``: cheap ones
(a parser, a reader of one file) many, costly ones (restoring a checkpoint, writing a
workdir) few. Each failure Hypothesis found is kept as an explicit ``@example`` of its test.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import random
import shutil
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

from transformer_jax.errors import UserError, shown

PROFILES = {"fuzz": 1, "fuzz-ci": 10, "fuzz-long": 50}
for _name, _scale in PROFILES.items():
    settings.register_profile(
        _name, max_examples=10 * _scale, deadline=None, print_blob=True,
        **({} if _name == "fuzz" else {"derandomize": False}),  # seeded by run_seed
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                               HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.large_base_example])
PROFILE = os.environ.get("FUZZ_PROFILE", "fuzz")
if PROFILE not in PROFILES:
    raise ValueError(f"FUZZ_PROFILE={PROFILE!r} is not one of {', '.join(PROFILES)}")

# Seconds one example may take before it counts as hung (a blocked read, a quadratic loop).
HANG_S = float(os.environ.get("FUZZ_HANG_S", "60"))

# What the inputs did, by test: tried, accepted, refused and the failures by kind. Each
# xdist worker writes its own to $FUZZ_TALLY/<worker>.json at the end (conftest.py).
TALLY: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
FAILURES = ("traceback", "silently accepted", "wrongly refused", "hung")


def run_seed() -> int:
    """The seed of a run of many examples (``pytest --hypothesis-seed=SEED``): FUZZ_SEED, to
    draw a run's examples again, else a new one each run."""
    return int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(2**32))


def examples(n: int) -> settings:
    """The settings of a property that takes ``n`` examples under the ``fuzz`` profile."""
    return settings(settings.get_profile(PROFILE), max_examples=max(1, n * PROFILES[PROFILE]))


class Traceback(AssertionError):
    """An input reached an exception that is not the project's one-line error."""


class SilentlyAccepted(AssertionError):
    """An input was accepted with a result that is not the one it asked for."""


class WronglyRefused(AssertionError):
    """A valid input (one the reader is documented to accept) was refused."""


class Hung(AssertionError):
    """An input kept the code busy past HANG_S seconds."""


class BadRefusal(AssertionError):
    """A refusal that is not one line naming the field or file."""


def _test_name() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]


def count(kind: str) -> None:
    """Counts one input of the running test as ``kind``."""
    TALLY[_test_name()][kind] += 1


@contextlib.contextmanager
def watchdog(seconds: float = HANG_S) -> Iterator[None]:
    """Raises Hung in the block when it runs past ``seconds`` (SIGALRM: the main thread,
    which is where pytest and its xdist workers run tests)."""
    def ring(signum: int, frame: Any) -> None:
        raise Hung(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(call: Callable[[], Any], names: Iterable[str],
            errors: tuple[type[BaseException], ...] = (UserError,),
            expect: bool | None = None) -> tuple[bool, Any]:
    """Runs ``call()`` once under the watchdog: (True, its result) when it accepts the input,
    (False, the error) when it refuses it with one of ``errors`` (the project's own) in one
    line naming one of ``names`` (a field, a file, a flag; as typed, or as errors.shown
    quotes it). Anything else fails the test,
    counted by kind: Traceback for another exception, Hung for a hang, BadRefusal for a
    refusal of several lines or naming nothing of the input. Count the accepted input's
    check with :func:`accepted`.

    ``expect``, where the test knows the answer (an input left valid, or one made invalid):
    True fails the test with WronglyRefused when the input is refused, False with
    SilentlyAccepted when it is accepted."""
    names = [n for n in names if n]
    try:
        with watchdog():
            result = call()
    except Hung:
        count("hung")
        raise
    except errors as e:
        message = str(e)
        if "\n" in message.strip() or not any(n in message or shown(n) in message
                                                for n in names):
            count("traceback")
            raise BadRefusal(f"the refusal {message!r} is not one line naming one of "
                             f"{names}") from e
        if expect:
            count("wrongly refused")
            raise WronglyRefused(f"a valid input refused: {message}") from e
        count("refused")
        return False, e
    except Exception as e:
        count("traceback")
        raise Traceback("".join(traceback.format_exception(e))[-3000:]) from e
    if expect is False:
        count("silently accepted")
        raise SilentlyAccepted(f"an invalid input accepted, read as {str(result)[:200]}")
    return True, result


def judged(said: Iterable[str], names: Iterable[str], consistent: bool, why: str = "",
           expect: bool | None = None) -> None:
    """Counts an input that a reader which goes on without what is damaged (as documented:
    a file of a run's description, a line of a log) took: "left out" when a warning it
    logged (``said``, :func:`warnings_logged`) names one of ``names`` (the file), in one line;
    else "accepted". SilentlyAccepted unless what was read is ``consistent`` (the file's
    values, less what the warning names). ``expect``: True, an input that must be read whole
    without a warning (WronglyRefused); False, one that must be left out (SilentlyAccepted)."""
    names = [n for n in names if n]
    warned = [w for w in said if any(n in w or shown(n) in w for n in names)]
    if any("\n" in w.strip() for w in warned):
        count("traceback")
        raise BadRefusal(f"a warning of several lines: {warned}")
    if expect and warned:
        count("wrongly refused")
        raise WronglyRefused(f"a valid input left out: {warned}")
    if expect is False and not warned:
        count("silently accepted")
        raise SilentlyAccepted("an invalid input read without a warning")
    if not consistent:
        count("silently accepted")
        raise SilentlyAccepted(why or "read as something it does not hold")
    count("left out" if warned else "accepted")


def accepted(consistent: bool, why: str = "") -> None:
    """Counts an accepted input; SilentlyAccepted unless its result is ``consistent``."""
    if not consistent:
        count("silently accepted")
        raise SilentlyAccepted(why or "accepted with a result it did not ask for")
    count("accepted")


@contextlib.contextmanager
def warnings_logged() -> Iterator[list[str]]:
    """The messages logged at WARNING or above while the block runs (what a reader says of
    what it left out), in order."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lines
    finally:
        root.removeHandler(handler)


def copy(workdir: Path, directory: str) -> Path:
    """A copy of ``workdir`` in ``directory``/run, to damage."""
    out = Path(directory) / "run"
    shutil.copytree(workdir, out, symlinks=True)
    return out
