"""The sweeps' fixtures: a real one-node SLURM cluster (tests/slurm_cluster.py) for the SLURM
launcher's tests."""

import pytest

from .. import needs, slurm_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A SLURM cluster of this machine, up for the session (each pytest-xdist worker that
    asks starts its own, on ports of its own); its daemons are stopped at the end. Without
    SLURM's programs the tests skip, except in CI (``CI`` set), where they fail."""
    missing = slurm_cluster.missing()
    if missing:
        needs.missing(f"SLURM is not installed (no {', '.join(missing)}): apt-get install "
                      f"{slurm_cluster.PACKAGES}")
    cluster = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()
