"""Test set-up: 8 fake CPU devices for the parallel tests, JAX's persistent compilation
cache, and the local Google Cloud Storage's address for the storage tests (all set before JAX
or a storage client is imported; the storage server starts only when a test asks for a
bucket)."""

import os
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Compiled programs are kept on disk, in .pytest_cache/jax-compilation of the checkout, by
# the session, its xdist workers and every command the tests start (they inherit the
# environment): the same tiny models are compiled again and again, by test after test and
# run after run. Every program is kept, however fast it compiled. Set
# JAX_COMPILATION_CACHE_DIR to put the cache elsewhere; delete the folder to start cold.
COMPILATION_CACHE = Path(__file__).resolve().parents[1] / ".pytest_cache" / "jax-compilation"
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(COMPILATION_CACHE))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

from . import gcs_emulator  # noqa: E402

GCS_PORT = gcs_emulator.free_port()
os.environ.update(gcs_emulator.environment(GCS_PORT))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def builtin_data_dir(tmp_path_factory):
    """The built-in corpus written once as TFDS array_record for the whole session."""
    from transformer_jax.data import sources

    data_dir = tmp_path_factory.mktemp("tfds")
    sources.prepare_builtin(str(data_dir))
    return data_dir


@pytest.fixture(scope="session")
def tiny_sweep(builtin_data_dir, tmp_path_factory):
    """(experiment file, root) of helpers.TINY_POINTS run once by the local launcher, two at
    a time: base and D_ls0 finished at step 10, broken failed. Copy the root to change it."""
    from transformer_jax.sweeps import sweep

    from .helpers import ROOT, tiny_experiment

    tmp_path = tmp_path_factory.mktemp("tiny_sweep")
    experiment = tiny_experiment(tmp_path / "tiny.py", builtin_data_dir)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # experiments name their config files relative to the repository
        outcome = sweep.run_sweep(sweep.load_experiment(experiment), str(tmp_path / "root"),
                                  "local", parallel=2)
    return experiment, tmp_path / "root", outcome


@pytest.fixture(scope="session")
def gcs_server():
    """The local Google Cloud Storage (tests/gcs_emulator.py), for the whole session."""
    if gcs_emulator.binary() is None and not os.environ.get("CI"):
        pytest.skip("no fake-gcs-server binary for this platform")
    server = gcs_emulator.Server(GCS_PORT)
    yield server
    server.stop()


@pytest.fixture
def bucket(gcs_server, request):
    """A new empty bucket, ``gs://NAME``, for one test."""
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:50]
    return gcs_server.create_bucket(name.strip("-") + f"-{os.getpid()}")


def pytest_collection_modifyitems(config, items):
    """The fault-injection suite (marker ``faults``, minutes long) runs only when selected
    with ``-m faults`` (``make faults``), never as part of ``pytest`` or ``make test``."""
    if "faults" in (config.getoption("markexpr") or ""):
        return
    deselected = [item for item in items if "faults" in item.keywords]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if "faults" not in item.keywords]
