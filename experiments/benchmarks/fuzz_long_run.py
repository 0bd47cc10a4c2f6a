"""The fuzz suite's long run: every property of tests/fuzz with fifty times the examples of
``make test`` (the ``fuzz-long`` profile), and what the generated inputs did.

    python experiments/benchmarks/fuzz_long_run.py [--workers=2] [--profile=fuzz-long]

Counts, over every property: the inputs tried, those accepted with a consistent result,
those refused in one line naming the field or file, and the failures: a traceback (an
exception that is not the project's own one-line error, or a refusal of several lines or
naming nothing), silently accepted (accepted with another result than the one asked for),
wrongly refused (a valid input refused), hung (past FUZZ_HANG_S seconds, 60 by default).
Counts include the inputs Hypothesis tries while it shrinks a failure. The goal, recorded in
docs/faults.md: at least 20,000 inputs and no failure. Prints its seed first (a new one each
run; FUZZ_SEED=N draws run N's examples again), a line a property, the inputs of each file of
tests/fuzz, then one JSON line of the totals (with the CPU seconds of the pytest processes,
and the machine).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from tests.fuzz.fuzzing import FAILURES, run_seed  # noqa: E402
from transformer_jax.io.workdirs import machine  # noqa: E402

GOAL = 20_000  # inputs at least


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--profile", default="fuzz-long", help="the Hypothesis profile")
    args = parser.parse_args()
    seed = run_seed()
    print(f"fuzz seed {seed}: FUZZ_SEED={seed} draws these examples again", flush=True)
    with tempfile.TemporaryDirectory() as tally:
        env = {**os.environ, "FUZZ_PROFILE": args.profile, "FUZZ_TALLY": tally}
        start, cpu = time.time(), os.times()
        ran = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/fuzz", "-q", "-p", "no:cacheprovider",
             "-m", "not slow", "--deselect", "tests/fuzz/test_commands.py",
             f"--hypothesis-seed={seed}",
             *(["-n", str(args.workers)] if args.workers > 1 else ["-p", "no:xdist"])],
            cwd=ROOT, env=env, capture_output=True, text=True)
        wall, cpu_after = time.time() - start, os.times()
        totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for path in Path(tally).glob("*.json"):
            for test, counts in json.loads(path.read_text()).items():
                totals[test].update(counts)
    print(ran.stdout[-3000:])
    everything: collections.Counter = collections.Counter()
    for test, counts in sorted(totals.items()):
        everything.update(counts)
        print(f"{sum(counts.values()):7,} inputs  {dict(counts)}  {test}")
    by_file: collections.Counter = collections.Counter()
    for test, counts in totals.items():
        by_file[test.split("::")[0]] += sum(counts.values())
    for name, n in sorted(by_file.items()):
        print(f"{n:7,} inputs  {name}")
    tried = sum(everything.values())
    figures = {
        "date": datetime.date.today().isoformat(), "profile": args.profile,
        "machine": machine(), "seed": seed, "properties": len(totals), "tried": tried,
        "accepted": everything["accepted"],
        "refused": everything["refused"], "left_out": everything["left out"],
        **{kind.replace(" ", "_"): everything[kind] for kind in FAILURES},
        "pytest_exit_status": ran.returncode, "wall_s": round(wall),
        "cpu_s": round(sum(cpu_after[i] - cpu[i] for i in (2, 3))),
    }
    print(json.dumps(figures))
    if ran.returncode or any(everything[k] for k in FAILURES) or tried < GOAL:
        sys.exit(1)


if __name__ == "__main__":
    main()
