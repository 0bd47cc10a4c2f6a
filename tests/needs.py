"""What a test needs from outside the suite (a package, a program, a server): missing, it skips
on a developer's machine and fails in CI (``CI=true``), where .ci/run installs everything, so
that CI never passes by skipping."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def missing(reason: str) -> NoReturn:
    """Skips the test, or fails it under ``CI=true``, saying what is missing and how to
    install it."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: .ci/run installs it)", pytrace=False)
    pytest.skip(reason)


def require(module: str, install: str) -> ModuleType:
    """The module ``module`` imported; where it cannot be, :func:`missing` naming
    ``install``, what provides it (e.g. "the hf extra: pip install -e '.[hf]'")."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing(f"{module} is not installed ({install}): {e}")
