"""experiments/benchmarks/base_rehearsal.py end to end, shrunk: WMT-format archives prepared by
TFDS's builder, a vocabulary learned from them, accumulated steps with a checkpoint each, and
the beam-4 evaluation of the average of the last 5. Its figures are checked against what the
test reads itself: the checkpoints on disk, the batches' slots from the logged metrics, BLEU
recomputed by sacreBLEU from the written translations, the checkpoint's size from the
parameter count worked out by hand, the process's peak memory from /proc."""

import json

import pytest
import sacrebleu

from ..needs import require

# TFDS extracts the archives with TensorFlow.
require("tensorflow", "the prepare extra, part of the test extra: pip install -e '.[test]'")


def _peak_rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


# The shrunk model's parameters by hand: V = 400, d = 64, d_ff = 128, one layer a side.
V, D, F = 400, 64, 128
ATTENTION = 4 * D * D + 3 * D  # Q, K, V, O; biases on Q, V and O
FFN = 2 * D * F + F + D
PARAMS = V * D + V + (ATTENTION + FFN + 2 * 2 * D) + (2 * ATTENTION + FFN + 3 * 2 * D)


@pytest.mark.slow  # a few minutes on 2 busy cores: TensorFlow's import, 2 compilations, beam
def test_the_base_rehearsal_runs_end_to_end(tmp_path):
    import tensorflow_datasets as tfds

    from experiments.benchmarks import base_rehearsal

    rss_before = _peak_rss_kib()
    f = base_rehearsal.rehearse(
        tmp_path, pairs=2_000, steps=6, accum_measured=2, sentences=8, vocab_size=400,
        vocab_sample=200_000, tokens_per_step=8 * 256,
        model={"num_layers": 1, "d_model": D, "d_ff": F, "num_heads": 4})
    # newstest2013 and newstest2014 as statmt ships them: 3,000 and 3,003 sentences.
    assert f["pairs"] == {"train": 2_000, "validation": 3_000, "test": 3_003}
    assert f["vocab_size"] == 400
    run = tmp_path / "run"

    # A checkpoint after each of the 6 steps, numbered in optimizer steps, the last 5 kept on
    # disk and averaged.
    kept = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert kept == [2, 3, 4, 5, 6] and f["checkpoints_kept"] == 5
    assert f["averaged_checkpoints"] == kept

    # Each step's slots, from what the run logged: 2 micro-batches of 1 row of 256.
    train = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("split") == "train":
            train.setdefault(record["step"], {}).update(record)
    assert sorted(train) == [1, 2, 3, 4, 5, 6]
    for r in train.values():
        tokens = r["tokens_per_s"] / r["steps_per_s"]
        assert tokens / (1 - r["padding_fraction"]) == pytest.approx(2 * 1 * 256, rel=1e-2)
    assert f["rows_per_micro_batch"] == 1 and f["accum_measured"] == 2
    # The full step (8 micro-batches) scaled from the measured one's 2.
    assert f["step_full_s"] == pytest.approx(4 * f["step_measured_s"])
    # The median step against the training's wall time: the first step (with its compilation)
    # and at least 3 of the 5 others take no less than the median each.
    assert f["first_step_s"] > f["step_measured_s"] > 0
    assert f["first_step_s"] + 3 * f["step_measured_s"] <= f["train_s"]

    # BLEU of the written translations against newstest2014's first 8 references.
    hyps = (run / "eval" / "test-avg5-beam4.hyp.txt").read_text().splitlines()
    refs = [r["en"].decode() for r in tfds.data_source(
        "wmt14_translate/de-en", split="test", data_dir=str(tmp_path / "tfds"),
        download=False)][:8]
    assert f["sentences"] == len(hyps) == 8
    assert f["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-6)

    # The checkpoint holds the parameters and Adam's two moments, float32.
    assert 3 * 4 * PARAMS / 2**20 <= f["checkpoint_mb"] <= 3 * 4 * PARAMS / 2**20 + 1
    assert f["save_s"] > 0
    assert rss_before <= f["peak_rss_gb"] * 2**20 <= _peak_rss_kib()
