"""The demo's training pinned: the first 30 steps of ``configs/demo.py`` on seed 0 give the
losses recorded from a run of the code at an earlier commit.

``tests/fixtures/demo_loss_curve.json`` was written by
``experiments/benchmarks/loss_curve.py --source=<checkout of 01876bb> --parallel=pmap
--record=...``: the demo's config at commit 01876bb (2026-12-04), trained with the pmap
path on one device, no accumulation, every step logged. Its per-step training loss,
learning rate and gradient norm, and its validation loss at step 30, are what training
gave then, computed by another process of other code, not by the code under test.

Today's code trains the same 30 steps here on the tests' 8 CPU devices, and the curve must
stay within ``loss_curve.TOLERANCE`` of the record (1e-3 in the loss: the paths and device
counts differ by at most 3.6e-5, consecutive steps by 0.003-0.12). A change to the step,
the loss, the schedule, the dropout masks, the vocabulary, the batching or the order of the
data moves some step's loss by more than that and fails here; a change that is meant to
change training records the curve anew (the command above, at the new commit) and says so.
"""

import json
from pathlib import Path

import pytest

from experiments.benchmarks import loss_curve

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "demo_loss_curve.json"


def check(parallel, builtin_data_dir):
    recorded = json.loads(RECORD.read_text())
    steps = len(recorded["train"]["loss"])
    got = loss_curve.run(steps, parallel, data_dir=str(builtin_data_dir))
    differences = loss_curve.differences(got, recorded)
    outside = {k: d for k, d in differences.items() if d > loss_curve.TOLERANCE[k]}
    assert not outside, (f"{parallel}: the demo's first {steps} steps moved from the curve "
                         f"recorded at {recorded['commit']}: {outside}")
    # The record is a curve that learns, and these steps are where it falls fastest.
    assert recorded["train"]["loss"][-1] < recorded["train"]["loss"][0] - 0.6


def test_the_demos_first_steps_give_the_recorded_losses(builtin_data_dir):
    check("sharded", builtin_data_dir)  # the default path: jit over a mesh of 8 devices


@pytest.mark.slow
def test_the_pmap_path_gives_the_recorded_losses_on_eight_devices(builtin_data_dir):
    check("pmap", builtin_data_dir)
