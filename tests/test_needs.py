"""What a test needs from outside the suite: missing, it skips on a developer's machine and
fails under CI=true, naming what to install."""

import pytest

from . import needs


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
    # Only CI=true makes it a failure; any other value skips.
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.skip.Exception):
        needs.missing("SLURM is not installed")


def test_a_module_that_is_there_is_returned():
    assert needs.require("json", "the standard library").dumps([1]) == "[1]"


@pytest.mark.faults  # mounting needs root, as the fault tests that use it do
def test_a_tmpfs_has_the_size_asked_for_and_is_unmounted_after(tmp_path):
    import shutil

    with needs.tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        assert shutil.disk_usage(disk).total == 64 * 1024
        (disk / "file").write_bytes(b"x")
    assert list((tmp_path / "disk").iterdir()) == []
