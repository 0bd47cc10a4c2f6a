"""What a test needs from outside the suite (a package, a program, a server): missing, it skips
on a developer's machine and fails in CI (the environment variable ``CI`` set to any non-empty
value), where .ci/run installs everything, so that CI never passes by skipping.

:class:`NoSkipInCI` (registered by tests/conftest.py) makes that hold for every skip, however
it came: in CI a run with a skipped test fails at its end, listing them, unless each is one of
:data:`ALLOWED_SKIPS`, the only skips CI cannot mend."""

from __future__ import annotations

import contextlib
import importlib
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from types import ModuleType
from typing import NoReturn

import pytest

PAPER_MD = "PAPER.md not found; set TRANSFORMER_JAX_PAPER_MD to its path"
OFF_GPU_FALLBACK = "the fallback is for non-GPU backends"

# The skips that pass CI, by what the skip says: why CI cannot mend each. Use
# :func:`allowed_skip` (or the reason itself in a skipif) so that the two stay one.
ALLOWED_SKIPS = {
    PAPER_MD: "tests/config/test_paper.py compares the figures with the paper's text, which is "
              "not part of the repository (the figures themselves are checked in the same file)",
    OFF_GPU_FALLBACK: "tests/model/test_attention.py's cuDNN fallback is for non-GPU backends: "
                      "skipped on a GPU, never on CI's CPU",
}


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def missing(reason: str) -> NoReturn:
    """Skips the test, or fails it in CI, saying what is missing and how to install it. At a
    module's top level it skips (or fails) the whole module."""
    if in_ci():
        pytest.fail(f"{reason} (CI={os.environ['CI']}: .ci/run installs it)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(module: str, install: str) -> ModuleType:
    """The module ``module`` imported; where it cannot be, :func:`missing` naming
    ``install``, what provides it (e.g. "the hf extra: pip install -e '.[hf]'"). May be
    called at a module's top level."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        error = e  # said outside the except clause: a failure of one line, not a chain
    missing(f"{module} is not installed ({install}): {error}")


def allowed_skip(reason: str) -> NoReturn:
    """Skips the test, in CI too: ``reason`` must be one of :data:`ALLOWED_SKIPS`."""
    if reason not in ALLOWED_SKIPS:
        raise ValueError(f"{reason!r} is not one of tests/needs.py's ALLOWED_SKIPS")
    pytest.skip(reason)


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return message.removeprefix("Skipped: ")


class NoSkipInCI:
    """A pytest plugin: in CI, a run where a test or a module was skipped for a reason not in
    :data:`ALLOWED_SKIPS` ends failed (exit status 1), listing each with its reason. Under
    pytest-xdist the workers' reports reach the controlling process, which judges."""

    def __init__(self) -> None:
        self.skipped: list[tuple[str, str]] = []

    def _seen(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped.append((report.nodeid or report.fspath, _reason(report)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._seen(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._seen(report)

    def unallowed(self) -> list[tuple[str, str]]:
        return [(test, why) for test, why in dict.fromkeys(self.skipped)
                if why not in ALLOWED_SKIPS]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not in_ci() or os.environ.get("PYTEST_XDIST_WORKER"):
            return
        unallowed = self.unallowed()
        if not unallowed:
            return
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        lines = [f"CI={os.environ['CI']}: {len(unallowed)} skipped, and no skip passes CI but "
                 "tests/needs.py's ALLOWED_SKIPS:", *(f"  {t}: {why}" for t, why in unallowed)]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True)
            else:
                print(line)


@contextlib.contextmanager
def tmpfs(directory: pathlib.Path, size_bytes: int) -> Iterator[pathlib.Path]:
    """``directory`` (made) with a tmpfs of ``size_bytes`` mounted on it for the ``with``
    block: a small file system a test can fill. Mounting needs root (or CAP_SYS_ADMIN): where
    ``mount`` refuses, :func:`missing`."""
    directory.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    ran = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs",
                          str(directory)], capture_output=True, text=True) if mount else None
    if ran is None or ran.returncode:
        missing(f"a small file system: `mount -t tmpfs` failed "
                f"({ran.stderr.strip() if ran else 'no mount command'}); run as root")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "--lazy", str(directory)], check=False)
