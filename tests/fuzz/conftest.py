"""The fuzz suite's tally: with FUZZ_TALLY set to a directory, each process of the run (the
session, or each xdist worker) writes what the generated inputs did, by test, to
``$FUZZ_TALLY/<worker>.json`` (read by experiments/benchmarks/fuzz_long_run.py)."""

import json
import os
from pathlib import Path

from . import fuzzing


def pytest_sessionfinish(session, exitstatus):
    directory = os.environ.get("FUZZ_TALLY")
    if not directory or not fuzzing.TALLY:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{worker}.json").write_text(json.dumps(
        {test: dict(counts) for test, counts in fuzzing.TALLY.items()}, indent=1))
