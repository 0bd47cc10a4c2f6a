"""The fuzz suite's tally: each property's inputs must have been both accepted and refused
(its explicit examples give both halves, whatever the generated ones do), and with FUZZ_TALLY
set to a directory, each process of the run (the session, or each xdist worker) writes what
the generated inputs did, by test, to ``$FUZZ_TALLY/<worker>.json`` (read by
tests/fuzz/test_many_examples.py and experiments/benchmarks/fuzz_long_run.py)."""

import json
import os
from pathlib import Path

import pytest

from . import fuzzing


@pytest.fixture(autouse=True)
def both_halves(request):
    """After a property (a Hypothesis test) has run: at least one input accepted and one
    refused (or, by a reader that goes on without what is damaged, left out with a warning),
    so that neither a reader refusing everything nor one accepting everything passes."""
    yield
    if not getattr(request.function, "is_hypothesis_test", False):
        return
    counts = fuzzing.TALLY.get(request.node.nodeid, {})
    if any(counts.get(kind) for kind in fuzzing.FAILURES):
        return  # the property failed already, saying why
    missing = [kind for kind, seen in (("accepted", counts.get("accepted")), (
        "refused or left out", counts.get("refused") or counts.get("left out"))) if not seen]
    if missing:
        pytest.fail(f"{request.node.nodeid}: no input {' and none '.join(missing)} "
                    f"(tally {dict(counts)}); give it an explicit @example of each half",
                    pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    directory = os.environ.get("FUZZ_TALLY")
    if not directory or not fuzzing.TALLY:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{worker}.json").write_text(json.dumps(
        {test: dict(counts) for test, counts in fuzzing.TALLY.items()}, indent=1))
