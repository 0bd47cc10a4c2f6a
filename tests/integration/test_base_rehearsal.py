"""experiments/benchmarks/base_rehearsal.py end to end, shrunk: WMT-format archives prepared by
TFDS's builder, a vocabulary learned from them, accumulated steps with a checkpoint each, and
the beam-4 evaluation of the average of the last 5."""

import pytest

pytest.importorskip("tensorflow", reason="TFDS extracts archives with TensorFlow (the "
                    "'prepare' extra)")


@pytest.mark.slow  # a few minutes on 2 busy cores: TensorFlow's import, 2 compilations, beam
def test_the_base_rehearsal_runs_end_to_end(tmp_path):
    from experiments.benchmarks import base_rehearsal, prepare_wmt

    f = base_rehearsal.rehearse(
        tmp_path, pairs=2_000, steps=6, accum_measured=2, sentences=8, vocab_size=400,
        vocab_sample=200_000, tokens_per_step=8 * 256,
        model={"num_layers": 1, "d_model": 64, "d_ff": 128, "num_heads": 4})
    dev = sum(prepare_wmt.DEV_PAIRS.values())
    assert f["pairs"] == {"train": 2_000, "validation": 3_000, "test": 3_003}
    assert sum(f["pairs"].values()) == 2_000 + dev
    assert f["vocab_size"] == 400
    # 2 micro-batches of 1 row of 256 slots a step; 6 steps, the last 5 kept and averaged
    # (checkpoints are numbered in micro-batches).
    assert f["rows_per_micro_batch"] == 1 and f["accum_measured"] == 2
    assert f["checkpoints_kept"] == 5 and f["averaged_checkpoints"] == [4, 6, 8, 10, 12]
    assert f["step_full_s"] == pytest.approx(4 * f["step_measured_s"])
    assert f["sentences"] == 8 and 0 <= f["bleu"] <= 100 and 0 <= f["tokenized_bleu"] <= 100
    assert f["checkpoint_mb"] > 0 and f["save_s"] > 0 and f["peak_rss_gb"] > 0
