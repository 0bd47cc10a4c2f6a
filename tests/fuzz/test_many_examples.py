"""The slow suite's fuzzing: every property of tests/fuzz again with ten times the examples
(the ``fuzz-ci`` profile of fuzzing.py), in a pytest of its own (about 125 s of CPU on one
core of the 2-core Intel Xeon, 2026-12-06)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_property_with_ten_times_the_examples(tmp_path):
    env = {**os.environ, "FUZZ_PROFILE": "fuzz-ci", "FUZZ_TALLY": str(tmp_path / "tally")}
    env.pop("PYTEST_XDIST_WORKER", None)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-m", "not slow", "--deselect", "tests/fuzz/test_commands.py",
         f"--basetemp={tmp_path / 'base'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert ran.returncode == 0, ran.stdout[-5000:]
    tally = json.loads((tmp_path / "tally" / "main.json").read_text())
    tried = sum(sum(counts.values()) for counts in tally.values())
    failed = sum(counts.get(k, 0) for counts in tally.values()
                 for k in ("traceback", "silently accepted", "hung"))
    assert tried >= 4000 and failed == 0, (tried, failed)
