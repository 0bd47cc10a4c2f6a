"""End to end on the built-in corpus: training lowers the loss, resuming loses nothing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

from transformer_jax.config import resume
from transformer_jax.data import sources
from transformer_jax.io import layout, workdirs
from transformer_jax.training import train

from ..helpers import run_command, tiny_config

ROOT = Path(__file__).resolve().parents[2]


def logged(workdir, split="train", key="loss"):
    """{step: value} from metrics.jsonl, the last line for a step winning."""
    return {step: record[key]
            for step, record in workdirs.read_metrics(workdir).get(split, {}).items()}


@pytest.mark.slow
def test_short_run_lowers_the_loss(tmp_path, builtin_data_dir):
    config = tiny_config(builtin_data_dir, num_steps=40, log_every=5, eval_every=20,
                         keep_checkpoints=2)
    final = train.train_and_evaluate(config, tmp_path)
    losses = logged(tmp_path)
    assert sorted(losses) == list(range(5, 45, 5))
    # 40 steps take the loss from ~5.4 (ln 200 pieces) to ~4.3-4.4 (0.79-0.81 of it over
    # data.shuffle_seed 0-2); a run that does not learn stays near 1.0 of it.
    assert losses[40] < 0.85 * losses[5]
    evals = logged(tmp_path, "eval", "perplexity")
    assert evals[40] < evals[20] and final["perplexity"] == evals[40]
    assert (tmp_path / layout.VOCAB / layout.VOCAB_MODEL).exists()
    assert sorted(int(p.name) for p in (tmp_path / layout.CHECKPOINTS).iterdir()
                  if p.name.isdigit()) == [30, 40]  # every 10 steps, the last 2 kept
    assert any((tmp_path / layout.TENSORBOARD).iterdir())


def test_resumed_run_repeats_an_uninterrupted_one(straight_run, resumed_run):
    # "Interrupted" after 10 steps, then the same command run to 20.
    straight, stopped = straight_run, resumed_run
    # config.json keeps the settings the run started with; the resume's change is recorded.
    assert json.loads((stopped / layout.CONFIG).read_text())["train"]["num_steps"] == 10
    changes = [json.loads(line)["changes"]
               for line in (stopped / "config_changes.jsonl").read_text().splitlines()]
    assert changes == [{"train.num_steps": [10, 20]}]
    assert not (stopped / "hold.json").exists()  # released by each run as it ended
    a, b = logged(straight), logged(stopped)
    assert sorted(a) == sorted(b) == list(range(1, 21))
    for step in range(1, 21):
        assert b[step] == pytest.approx(a[step], abs=1e-6), step


# Slow: a process of its own (JAX imported and every program compiled again), the CPU's
# matmul probe, BLEU, samples and the attention pictures: 48 CPU-seconds, over 30 s on
# 2 cores.
@pytest.mark.slow
def test_main_command_trains_and_reports_bad_workdir(tmp_path, builtin_data_dir):
    # The one run of the main command in a process of its own, and the one run of the suite
    # that measures the CPU's peak for MFU with the matmul probe (train.peak_flops = 0).
    args = ["--config=configs/demo.py",
            f"--config.data.data_dir={builtin_data_dir}", "--config.data.vocab_size=200",
            "--config.data.vocab_sample=200000", "--config.model.num_layers=1",
            "--config.model.d_model=32", "--config.model.d_ff=64",
            "--config.train.num_steps=4", "--config.train.log_every=2",
            "--config.train.bleu_sentences=8", "--config.train.samples=2",
            "--config.train.eval_batches=1", "--config.train.visualize_sentences=(49,)"]
    run = tmp_path / "run"
    ok = subprocess.run([sys.executable, "-m", "transformer_jax.main", *args, f"--workdir={run}"],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "test BLEU" in ok.stderr and "reference:" in ok.stdout
    assert (run / "pictures" / "test_49" / "attention.html").exists()
    assert "peak FLOP/s measured by a matmul probe (float32) on cpu" in ok.stderr
    mfu = [r["mfu"] for r in workdirs.read_metric_records(run) if r["split"] == "train"]
    assert len(mfu) == 2 and all(0.0 < m <= 1.0 for m in mfu)
    # The test BLEU is sacreBLEU's of the translations and references written: the first 8
    # sentences of the test split.
    final = json.loads((run / layout.FINAL_METRICS).read_text())
    hyps = (run / final["test_hypotheses"]).read_text(encoding="utf-8").splitlines()
    refs = (run / final["test_references"]).read_text(encoding="utf-8").splitlines()
    test = sources.get_source(resume.workdir_config(run).data, "test")
    assert refs == [test[i][1] for i in range(8)] and len(hyps) == 8
    assert final["bleu_sentences"] == 8
    assert final["test_bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score,
                                               abs=1e-9)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    bad = run_command("main", *args, f"--workdir={blocker / 'run'}")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith(f"error: workdir {blocker / 'run'}")
