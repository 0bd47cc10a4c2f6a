"""A trained workdir: restored, translate(), and the evaluate command end to end."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import sacrebleu
import sentencepiece

from transformer_jax.config import resume
from transformer_jax.data import sources
from transformer_jax.data.pipeline import DataSpec
from transformer_jax.data.tokenizer import EOS_ID
from transformer_jax.decoding import decode
from transformer_jax.errors import UserError
from transformer_jax.evaluation import bleu, restore, score, translation
from transformer_jax.evaluation.restore import WorkdirSpec
from transformer_jax.io import checkpoints, layout, workdirs
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer
from transformer_jax.training.step import create_train_state

from ..helpers import run_command

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------
# translate() and the evaluate command on a tiny trained model


@pytest.fixture(scope="module")
def workdir(trained_workdir):
    return trained_workdir


@pytest.fixture
def run_config(workdir):
    """The run's saved config, as the commands load it."""
    return resume.workdir_config(workdir)


def test_translate_keeps_order_and_empty_lines(workdir, run_config):
    loaded = restore.load_workdir(workdir, WorkdirSpec.from_config(run_config))
    source = sources.get_source(run_config.data, "test")
    sentences = [source[i][0] for i in range(6)]
    sentences = sentences[:2] + ["", "   "] + sentences[2:]
    greedy = decode.DecodeConfig(strategy="greedy", max_len_offset=10)
    whole = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer,
                                  sentences, greedy.replace(batch_size=64))
    assert whole[2] == whole[3] == "" and all(whole[i] for i in (0, 1, 4, 5, 6, 7))
    # Batches of 3 sentences sorted by length: the same translations, in input order.
    batched = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer,
                                    sentences, greedy.replace(batch_size=3))
    assert batched == whole
    one_by_one = [translation.translate(loaded.params, loaded.model_config, loaded.tokenizer,
                                        [s], greedy)[0] for s in sentences[:2]]
    assert one_by_one == whole[:2]


def test_a_long_source_keeps_its_end_of_sentence_when_shortened():
    eos = EOS_ID
    assert translation.shorten([7, 8, 9, 10, eos], 3) == [7, 8, eos]
    assert translation.shorten([7, 8, eos], 3) == [7, 8, eos]
    assert translation.input_limit(64) == 64 and translation.input_limit(64, 64) == 64
    for bad in (0, 65):
        with pytest.raises(UserError, match=f"--max_input_len={bad} must be between 1 and the "
                                            "model's limit of 64 tokens"):
            translation.input_limit(64, bad)


def _perplexity_by_hand(workdir, run_config, pairs):
    ckpts = checkpoints.Checkpoints(workdir, keep=3)
    vocab_size = ckpts.read_meta(30)["vocab_size"]
    model_config = TransformerConfig.from_config(run_config.model, vocab_size)
    template = create_train_state(run_config, model_config, jax.random.key(0))
    each = [ckpts.restore(step, template)[0].params for step in (10, 20, 30)]
    ckpts.close()
    mean = jax.tree.map(lambda *x: sum(np.asarray(a, np.float64) for a in x) / 3, *each)
    mean = jax.tree.map(lambda x: x.astype(np.float32), mean)
    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(workdir / layout.VOCAB / layout.VOCAB_MODEL))
    n = run_config.data.max_len
    src = [(sp.encode(s) + [EOS_ID])[:n] for s, _ in pairs]
    tgt = [(sp.encode(t) + [EOS_ID])[:n] for _, t in pairs]
    pad = lambda rows: np.array([r + [0] * (n - len(r)) for r in rows], np.int32)  # noqa: E731
    logits = Transformer(model_config.replace(deterministic=True)).apply(
        {"params": mean}, pad(src), pad(tgt))
    log_p = np.asarray(jax.nn.log_softmax(np.asarray(logits, np.float64)))
    targets = pad(tgt)
    picked = np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    mask = targets != 0
    return math.exp(-picked[mask].sum() / mask.sum())


def test_evaluate_averages_and_writes_hypotheses_and_scores(workdir, run_config, tmp_path):
    workdir = shutil.copytree(workdir, tmp_path / "run")  # the evaluation writes into it
    run_config.decode.strategy = "greedy"
    run_config.data.token_cache = True  # the split's ids are read from its token cache
    result = score.evaluate_workdir(workdir, WorkdirSpec.from_config(run_config),
                                   DataSpec.from_config(run_config), "test", average=3,
                                   limit=24)
    assert len(list((workdir / "vocab" / "tokens").glob("test-*.array_record"))) == 1
    assert result["checkpoints"] == [10, 20, 30] and result["sentences"] == 24
    hyp_file = workdir / "eval" / "test-avg3-greedy.hyp.txt"
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    source = sources.get_source(run_config.data, "test")
    refs = [source[i][1] for i in range(24)]
    assert len(hyps) == 24
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    # The paper-comparable figure: sacreBLEU over the Moses-tokenized, compound-split text
    # (tokenize_for_bleu is checked by hand in test_bleu.py).
    split = lambda lines: [bleu.tokenize_for_bleu(x) for x in lines]  # noqa: E731
    assert result["tokenized_bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(split(hyps), [split(refs)], tokenize="none").score)
    saved = json.loads((workdir / "eval" / "test-avg3-greedy.json").read_text())
    assert saved["bleu"] == result["bleu"] and saved["decode"]["strategy"] == "greedy"
    # Perplexity worked out apart from the evaluation's code: the mean of checkpoints 10, 20
    # and 30 restored one by one, each pair encoded by SentencePiece itself (cut to data.max_len
    # ids, as evaluation does), one pair a padded row instead of packed rows, and exp of the
    # mean negative log-likelihood of the target tokens.
    assert result["perplexity"] == pytest.approx(_perplexity_by_hand(workdir, run_config, [
        source[i] for i in range(24)]), rel=1e-4)
    assert 1.0 < result["perplexity"] < run_config.data.vocab_size * 2
    with pytest.raises(UserError, match="last 4 checkpoints: .* holds 3"):
        restore.load_workdir(workdir, WorkdirSpec.from_config(run_config), average=4)


def test_evaluate_averages_the_configs_number_or_what_the_workdir_holds(workdir, run_config):
    # keep_checkpoints = 3 and average_checkpoints = 0: the last 3, which span the whole run.
    loaded = restore.load_workdir(workdir, WorkdirSpec.from_config(run_config))
    assert loaded.steps == [10, 20, 30]
    assert loaded.notes == ["the averaged checkpoints (steps 10, 20, 30) reach back to 33% of "
                            "step 30, an early part of training; the paper's span its last "
                            "4-6% of steps (--average=1 takes the latest alone)"]
    run_config.train.keep_checkpoints = 20  # as the big model's config would ask
    loaded = restore.load_workdir(workdir, WorkdirSpec.from_config(run_config))
    assert loaded.steps == [10, 20, 30]
    assert loaded.notes[0] == (f"the config averages the last 20 checkpoints but "
                               f"{workdir / 'checkpoints'} holds 3: averaging those")
    latest = restore.load_workdir(workdir, WorkdirSpec.from_config(run_config), average=1)
    assert latest.steps == [30] and latest.notes == []


@pytest.mark.slow
def test_evaluate_command(workdir, tmp_path):
    # The one run of the evaluate command in a process of its own.
    workdir = shutil.copytree(workdir, tmp_path / "run")  # the evaluation writes into it
    # Enough validation sentences (at least 20) to hold one longer than the model takes,
    # counted with the workdir's SentencePiece model (pieces and the end-of-sentence token).
    limit = json.loads((workdir / layout.CONFIG).read_text())["model"]["max_len"]
    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(workdir / layout.VOCAB / layout.VOCAB_MODEL))
    source = sources.get_source(resume.workdir_config(workdir).data, "validation")
    counts = [len(sp.encode(source[i][0])) + 1 for i in range(len(source))]
    first_long = next((i for i, n in enumerate(counts) if n > limit), None)
    assert first_long is not None, "no validation sentence is longer than the model takes"
    sentences = max(20, first_long + 1)
    out = subprocess.run(
        [sys.executable, "-m", "transformer_jax.evaluate", f"--workdir={workdir}",
         "--split=validation", "--average=2", f"--limit={sentences}",
         "--config.decode.beam_size=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"validation: {sentences} sentences; parameters of checkpoint(s) "
                               "20, 30 averaged; beam 2, alpha 0.6, max length input + 50")
    assert lines[1].startswith("warning: the averaged checkpoints (steps 20, 30) reach back to "
                               "67% of step 30, an early part of training")
    assert any(line.startswith("BLEU (sacreBLEU, detokenized): ") and "tok:13a" in line
               for line in lines)
    assert any(line.startswith("BLEU (tokenized, compound-split") and "tok:none" in line
               for line in lines)
    saved = json.loads((workdir / "eval" / "validation-avg2-beam2.json").read_text())
    assert saved["decode"]["beam_size"] == 2 and saved["checkpoints"] == [20, 30]
    # The sources longer than the model takes, each named on stderr, then their count.
    long = [(number, n) for number, n in enumerate(counts[:sentences], start=1) if n > limit]
    assert [line for line in out.stderr.splitlines() if "shortened" in line] == [
        f"warning: validation sentence {number}: {n} tokens, more than the model's {limit}; "
        f"shortened to its first {limit - 1} and the end-of-sentence token"
        for number, n in long] + [
        f"warning: {len(long)} of {sentences} validation sentences shortened to the model's "
        f"limit of {limit} tokens"]
    assert saved["shortened_sources"] == [{"number": number, "tokens": n} for number, n in long]
    assert saved["source_limit"] == limit
    bad = run_command("evaluate", f"--workdir={workdir}", "--average=9")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith(
        "error: cannot average the last 9 checkpoints")


def test_training_logs_validation_bleu(workdir, run_config):
    evals = workdirs.read_metrics(workdir)["eval"]
    scores = {step: record["bleu"] for step, record in evals.items() if "bleu" in record}
    assert sorted(scores) == [10, 20, 30]  # train.bleu_every = 10
    # Step 30's is sacreBLEU's of the last checkpoint's translations of the first 8
    # validation sentences (the run's decoding: beam search), against their references.
    loaded = restore.load_workdir(workdir, WorkdirSpec.from_config(run_config), average=1)
    assert loaded.steps == [30]
    validation = sources.get_source(run_config.data, "validation")
    pairs = [validation[i] for i in range(8)]
    hyps = translation.translate(loaded.params, loaded.model_config, loaded.tokenizer,
                                 [s for s, _ in pairs],
                                 decode.DecodeConfig.from_config(run_config.decode))
    assert scores[30] == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [[t for _, t in pairs]]).score, abs=1e-9)
    # The final test BLEU is sacreBLEU's of the translations and references written.
    final = json.loads((workdir / layout.FINAL_METRICS).read_text())
    assert final["bleu_sentences"] == 8
    written = [(workdir / final[f"test_{kind}"]).read_text(encoding="utf-8").splitlines()
               for kind in ("hypotheses", "references")]
    test = sources.get_source(run_config.data, "test")
    assert written[1] == [test[i][1] for i in range(8)] and len(written[0]) == 8
    assert final["test_bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(written[0], [written[1]]).score, abs=1e-9)
