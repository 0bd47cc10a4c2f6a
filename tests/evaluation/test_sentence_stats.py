"""A run's sentence statistics (evaluation/sentence_stats.py), written at the end of training:
summed and scored they give the corpus figures sacreBLEU computes from the run's saved
translations, and the perplexity the evaluate command computes from packed batches."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import sacrebleu

from transformer_jax.config import resume
from transformer_jax.evaluation import evaluate, sentence_stats
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
    # The whole validation split, one value a sentence.
    assert arrays[sentence_stats.NLL].shape == (1000,) == arrays[sentence_stats.TOKENS].shape
    assert (arrays[sentence_stats.TOKENS] > 0).all() and (arrays[sentence_stats.NLL] > 0).all()


def test_validation_nll_gives_the_perplexity_of_packed_batches(trained_workdir, tmp_path):
    """The first 40 validation sentences: exp(sum NLL / sum tokens) of the sentence
    statistics (one sentence a row) is the perplexity the evaluate command computes over
    packed batches of the same sentences with the same parameters."""
    workdir = tmp_path / "run"
    shutil.copytree(trained_workdir, workdir)
    arrays = _arrays(workdir)
    config = resume.workdir_config(str(workdir), {}, ())
    result = evaluate.evaluate_workdir(workdir, config, "validation", limit=40)
    nll, tokens = arrays[sentence_stats.NLL][:40], arrays[sentence_stats.TOKENS][:40]
    assert int(tokens.sum()) == result["target_tokens"]
    assert sentence_stats.perplexity(nll, tokens) == pytest.approx(result["perplexity"],
                                                                   rel=1e-5)
    # And the evaluate command writes the same file again from the checkpoint.
    (workdir / layout.SENTENCE_STATS).unlink()
    evaluate.write_sentence_stats(workdir, config)
    again = _arrays(workdir)
    assert np.array_equal(again[sentence_stats.BLEU], arrays[sentence_stats.BLEU])
    assert np.allclose(again[sentence_stats.NLL], arrays[sentence_stats.NLL], rtol=1e-5)


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
