"""What a test needs from outside the suite (a package, a program, a server): missing, it skips
on a developer's machine and fails in CI (``CI=true``), where .ci/run installs everything, so
that CI never passes by skipping."""

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
