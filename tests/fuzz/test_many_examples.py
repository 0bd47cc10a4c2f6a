"""The slow suite's fuzzing: every property of tests/fuzz again with ten times the examples
(the ``fuzz-ci`` profile of fuzzing.py), in a pytest of its own (about 125 s of CPU on one
core of the 2-core Intel Xeon, 2026-12-06), drawing new examples on every run from a seed it
prints (``FUZZ_SEED=N`` draws run N's again; a failure also prints Hypothesis's
``@reproduce_failure`` blob)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .fuzzing import FAILURES, run_seed

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_property_with_ten_times_the_examples(tmp_path):
    seed = run_seed()
    print(f"fuzz seed {seed}: FUZZ_SEED={seed} draws these examples again")
    env = {**os.environ, "FUZZ_PROFILE": "fuzz-ci", "FUZZ_TALLY": str(tmp_path / "tally")}
    env.pop("PYTEST_XDIST_WORKER", None)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-m", "not slow", "--deselect", "tests/fuzz/test_commands.py",
         f"--hypothesis-seed={seed}", f"--basetemp={tmp_path / 'base'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert ran.returncode == 0, f"FUZZ_SEED={seed}\n{ran.stdout[-5000:]}"
    tally = json.loads((tmp_path / "tally" / "main.json").read_text())
    tried = sum(sum(counts.values()) for counts in tally.values())
    assert tried >= 4000, (seed, tried)
    # Each property by itself: no failure, and both halves (an input accepted, one refused
    # or left out with a warning), not totals that one property's outcomes could make up.
    for test, counts in tally.items():
        assert not any(counts.get(kind) for kind in FAILURES), (seed, test, counts)
        assert counts.get("accepted") and (counts.get("refused") or counts.get("left out")), \
            (seed, test, counts)
