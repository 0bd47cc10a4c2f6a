"""What every run records: its provenance (code, command, versions, devices), a new entry
when it resumes, TensorBoard hparams of its swept values and final metrics, and the test
translations the significance tests read."""

import json
import subprocess
import sys

import pytest

from transformer_jax.io import provenance, workdirs

from ..helpers import ROOT


@pytest.fixture(scope="module")
def workdir(trained_workdir):
    return trained_workdir


def test_a_run_records_its_code_command_versions_and_devices(workdir):
    runs = provenance.read(workdir)
    assert len(runs) == 1
    run = runs[0]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert run["commit"] == head and isinstance(run["dirty"], bool)
    assert set(provenance.PACKAGES) <= set(run["versions"])
    assert run["versions"]["jax"][0].isdigit() and run["versions"]["runtime"].startswith("cpu")
    assert run["devices"]["platform"] == "cpu" and run["devices"]["global"] >= 1
    assert run["processes"] == 1 and run["resumed_at_step"] == 0
    assert run["command"].startswith(sys.executable) and run["host"]
    assert provenance.fingerprint(run)["code"] == head[:12] + ("+uncommitted" if run["dirty"]
                                                                 else "")


def test_a_resumed_run_adds_its_own_entry(resumed_run):
    # Trained to step 10, then resumed there to 20.
    assert [r["resumed_at_step"] for r in provenance.read(resumed_run)] == [0, 10]


def test_hparams_and_test_translations_are_written(workdir):
    events = list((workdir / "tb" / "hparams").glob("events.out.tfevents.*"))
    assert len(events) == 1
    data = events[0].read_bytes()
    # The HParams plugin's session records, the run's hyperparameters and its final metrics.
    for needle in (b"_hparams_/experiment", b"_hparams_/session_start_info", b"train.seed",
                   b"data.shuffle_seed", b"d_model", b"eps_ls", b"hparams/perplexity",
                   b"hparams/test_bleu"):
        assert needle in data, needle
    final = json.loads((workdir / "final_metrics.json").read_text())
    # Readers keep every figure training wrote (none of another type than they take).
    assert workdirs.read_final(workdir) == final
    assert type(final["tokens"]) is int and final["step"] > 0
    hyps = (workdir / final["test_hypotheses"]).read_text().splitlines()
    refs = (workdir / final["test_references"]).read_text().splitlines()
    assert len(hyps) == len(refs) == final["bleu_sentences"] > 0
