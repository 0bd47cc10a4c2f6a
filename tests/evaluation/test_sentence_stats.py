"""A run's sentence statistics (evaluation/sentence_stats.py), written at the end of training:
summed and scored they give the corpus figures sacreBLEU computes from the run's saved
translations, and the perplexity the evaluate command computes from packed batches."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import sacrebleu

from transformer_jax.config import resume
from transformer_jax.data.pipeline import DataSpec
from transformer_jax.evaluation import score, sentence_stats
from transformer_jax.evaluation.restore import WorkdirSpec
from transformer_jax.io import layout


def _arrays(workdir):
    return sentence_stats.loads((workdir / layout.SENTENCE_STATS).read_bytes())


def test_the_end_of_training_writes_them_and_they_score_as_sacrebleu(trained_workdir):
    arrays = _arrays(trained_workdir)
    assert not sentence_stats.check(arrays)
    hyps = (trained_workdir / layout.FINAL_HYPOTHESES).read_text().splitlines()
    refs = (trained_workdir / layout.FINAL_REFERENCES).read_text().splitlines()
    assert len(hyps) == 8 and arrays[sentence_stats.BLEU].shape == (8, 10)
    bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
    chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
    assert sentence_stats.figure(arrays, sentence_stats.BLEU) == pytest.approx(bleu)
    assert sentence_stats.figure(arrays, sentence_stats.CHRF) == pytest.approx(chrf)
    # Any subset of the sentences scores as sacreBLEU scores that subset.
    keep = [0, 3, 5]
    sub = arrays[sentence_stats.BLEU][keep].sum(axis=0)
    assert float(sentence_stats.bleu_score(sub)) == pytest.approx(
        sacrebleu.corpus_bleu([hyps[i] for i in keep], [[refs[i] for i in keep]]).score)
    # Its validation covered 2 batches of the split (train.eval_batches=2): no sentence's
    # NLL is kept, since the run's perplexity is not theirs.
    assert sentence_stats.NLL not in arrays


def test_a_run_that_evaluates_the_whole_split_keeps_each_sentence_nll(builtin_data_dir,
                                                                      tmp_path):
    """eval_batches=0: the whole validation split, one value a sentence, and exp(sum NLL /
    sum tokens) is the perplexity the run logged from packed batches."""
    import json

    from transformer_jax.training import train

    from ..helpers import tiny_config

    config = tiny_config(builtin_data_dir, num_steps=10, eval_every=10, eval_batches=0,
                         bleu_sentences=4)
    train.train_and_evaluate(config, tmp_path / "run")
    arrays = _arrays(tmp_path / "run")
    final = json.loads((tmp_path / "run" / layout.FINAL_METRICS).read_text())
    assert arrays[sentence_stats.NLL].shape == (1000,) == arrays[sentence_stats.TOKENS].shape
    assert int(arrays[sentence_stats.TOKENS].sum()) == final["tokens"]
    assert sentence_stats.perplexity(arrays[sentence_stats.NLL],
                                     arrays[sentence_stats.TOKENS]) == pytest.approx(
        final["perplexity"], rel=1e-5)


def test_the_evaluate_command_writes_them_for_a_run_trained_before(trained_workdir, tmp_path):
    """evaluate --sentence_stats: the whole validation split's NLL, whose first 40 sentences
    give the perplexity the evaluate command computes over packed batches of the same
    sentences with the same parameters."""
    workdir = tmp_path / "run"
    shutil.copytree(trained_workdir, workdir)
    config = resume.workdir_config(str(workdir), {}, ())
    (workdir / layout.SENTENCE_STATS).unlink()
    run, data = WorkdirSpec.from_config(config), DataSpec.from_config(config)
    score.write_sentence_stats(workdir, run, data)  # the evaluate command's, whole split
    arrays = _arrays(workdir)
    assert arrays[sentence_stats.NLL].shape == (1000,)
    result = score.evaluate_workdir(workdir, run, data, "validation", limit=40)
    nll, tokens = arrays[sentence_stats.NLL][:40], arrays[sentence_stats.TOKENS][:40]
    assert int(tokens.sum()) == result["target_tokens"]
    assert sentence_stats.perplexity(nll, tokens) == pytest.approx(result["perplexity"],
                                                                   rel=1e-5)
    # Its test statistics are those the end of training wrote.
    assert np.array_equal(arrays[sentence_stats.BLEU],
                          _arrays(trained_workdir)[sentence_stats.BLEU])


def test_damaged_statistics_are_named():
    good = {sentence_stats.BLEU: np.zeros((3, 10), np.int64),
            sentence_stats.NLL: np.ones(2), sentence_stats.TOKENS: np.ones(2, np.int64)}
    assert sentence_stats.check(good) == ""
    assert "shape" in sentence_stats.check({sentence_stats.BLEU: np.zeros((3, 9))})
    assert "come together" in sentence_stats.check({sentence_stats.NLL: np.ones(2)})
    assert "not finite" in sentence_stats.check({**good, sentence_stats.NLL: np.array([1.0,
                                                                                     np.nan])})
    back = sentence_stats.loads(sentence_stats.dumps(good))
    assert all(np.array_equal(back[k], good[k]) for k in good)
    with pytest.raises(ValueError, match="not sentence statistics"):
        sentence_stats.loads(b"not an npz")
