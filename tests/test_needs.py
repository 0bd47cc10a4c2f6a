"""What a test needs from outside the suite: missing, it skips on a developer's machine and
fails in CI (CI set to any non-empty value), naming what to install; and in CI a run with any
skip but tests/needs.py's ALLOWED_SKIPS fails at its end (tiny test files run by pytester)."""

import pytest

from . import needs

pytest_plugins = ["pytester"]


def test_a_missing_module_skips_here_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"no_such_module_x is not installed "
                                                    r"\(the zz extra: pip install -e '\.\[zz\]'\)"):
        needs.require("no_such_module_x", "the zz extra: pip install -e '.[zz]'")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no_such_module_x is not installed .*"
                                                    r"\(CI=true: \.ci/run installs it\)"):
        needs.require("no_such_module_x", "the zz extra: pip install -e '.[zz]'")
    with pytest.raises(pytest.fail.Exception, match="^SLURM is not installed"):
        needs.missing("SLURM is not installed")
    # Any value of CI makes it a failure: CI=1 as much as CI=true.
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"\(CI=1: \.ci/run installs it\)$"):
        needs.missing("SLURM is not installed")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception):
        needs.missing("SLURM is not installed")


def test_a_module_that_is_there_is_returned():
    assert needs.require("json", "the standard library").dumps([1]) == "[1]"


def test_only_a_listed_reason_is_an_allowed_skip():
    with pytest.raises(pytest.skip.Exception, match="PAPER.md not found"):
        needs.allowed_skip(needs.PAPER_MD)
    with pytest.raises(ValueError, match="'another' is not one of tests/needs.py's ALLOWED_SKIPS"):
        needs.allowed_skip("another")


TINY = """
import pytest
from tests import needs

def test_runs():
    assert 1 + 1 == 2

def test_skips_bare():
    pytest.skip("not here")

@pytest.mark.skipif(True, reason="a marker")
def test_skips_by_marker():
    pass

def test_skips_allowed():
    needs.allowed_skip(needs.PAPER_MD)

@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False
"""


@pytest.mark.parametrize("ci", [None, "1", "true"])
def test_a_skip_fails_the_run_in_ci_but_an_allowed_one(pytester, monkeypatch, ci):
    # The inner run is a session of its own, also when this one is an xdist worker's.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_tiny=TINY)
    ran = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly",
                             plugins=[needs.NoSkipInCI()])
    ran.assert_outcomes(passed=1, skipped=3, xfailed=1)
    if not ci:
        assert ran.ret == pytest.ExitCode.OK
        assert "no skip passes CI" not in ran.stdout.str()
        return
    assert ran.ret == pytest.ExitCode.TESTS_FAILED
    ran.stdout.fnmatch_lines([
        f"CI={ci}: 2 skipped, and no skip passes CI but tests/needs.py's ALLOWED_SKIPS:",
        "  test_tiny.py::test_skips_bare: not here",
        "  test_tiny.py::test_skips_by_marker: a marker"])
    assert "test_skips_allowed" not in ran.stdout.str()


MODULE_LEVEL = """
from tests.needs import require

require("no_such_module_x", "the zz extra: pip install -e '.[zz]'")

def test_never_collected():
    pass
"""


@pytest.mark.parametrize("ci", [None, "1"])
def test_require_at_module_level_skips_the_module_or_fails_in_ci(pytester, monkeypatch, ci):
    """Never a collection error where the module is missing: the documented skip, or in CI
    the documented failure naming what to install."""
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_module_level=MODULE_LEVEL)
    ran = pytester.runpytest("-p", "no:cacheprovider", "-rs", plugins=[needs.NoSkipInCI()])
    out = ran.stdout.str()
    if ci is None:
        ran.assert_outcomes(skipped=1)
        assert ran.ret == pytest.ExitCode.NO_TESTS_COLLECTED
        assert "no_such_module_x is not installed (the zz extra" in out and "rror" not in out
    else:
        ran.assert_outcomes(errors=1)
        assert ran.ret == pytest.ExitCode.INTERRUPTED
        assert ("\nno_such_module_x is not installed (the zz extra: pip install -e '.[zz]'): "
                "No module named 'no_such_module_x' (CI=1: .ci/run installs it)\n") in out
        assert "During handling" not in out


@pytest.mark.faults  # mounting needs root, as the fault tests that use it do
def test_a_tmpfs_has_the_size_asked_for_and_is_unmounted_after(tmp_path):
    import shutil

    with needs.tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        assert shutil.disk_usage(disk).total == 64 * 1024
        (disk / "file").write_bytes(b"x")
    assert list((tmp_path / "disk").iterdir()) == []
