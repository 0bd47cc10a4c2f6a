"""The CTranslate2 export of the tiny trained model against our own decoding and scores:
ctranslate2.Translator must give our greedy output, our best beam-4 hypothesis on at least
95 of 100 sentences and our log-probabilities of forced targets; a wrong position table or
id order must fail the same checks."""

import os

import jax
import numpy as np
import pytest

from ..needs import require

ctranslate2 = require("ctranslate2", "the test extra: pip install -e '.[test]'")

from transformer_jax.config import resume  # noqa: E402
from transformer_jax.data import sources  # noqa: E402
from transformer_jax.data.batching import pad_batch  # noqa: E402
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID, UNK_ID  # noqa: E402
from transformer_jax.decoding import decode  # noqa: E402
from transformer_jax.evaluation.restore import WorkdirSpec  # noqa: E402
from transformer_jax.exports import ctranslate2 as target, mapping  # noqa: E402
from transformer_jax.model.transformer import Transformer  # noqa: E402

from ..helpers import run_command  # noqa: E402

SENTENCES = 100


@pytest.fixture(scope="module")
def run(trained_workdir):
    config = resume.workdir_config(trained_workdir)
    loaded = mapping.load(trained_workdir, WorkdirSpec.from_config(config), 1)
    tok, mc = loaded.tokenizer, loaded.model_config
    pairs = sources.get_source(config.data, "test").read(range(SENTENCES))
    # Whole sentences only (ending with EOS), as both sides see them.
    fit = lambda text: tok.encode(text, add_eos=False)[: mc.max_len - 1] + [EOS_ID]  # noqa: E731
    return loaded, config, [fit(s) for s, _ in pairs], [fit(t) for _, t in pairs]


def _export(run, directory, **wrong):
    loaded, _, _, _ = run
    mc = loaded.model_config
    spec = target.build_spec(mapping.layers_of(loaded.params, mc), mc,
                             mapping.vocabulary(loaded.tokenizer, mc.vocab_size), **wrong)
    os.makedirs(directory)
    target.write(str(directory), spec, None)
    return ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)


def _pieces(tok, ids):
    return [[tok.sp.id_to_piece(i) for i in x[:-1]] for x in ids]  # CTranslate2 adds EOS


def _until_eos(row):
    # Our output: the tokens, then EOS or (a sentence that reached its maximum) padding.
    row = [int(i) for i in row if i != PAD_ID]
    return row[: row.index(EOS_ID)] if EOS_ID in row else row


def _ours(run, decoding):
    loaded, config, src, _ = run
    mc, offset = loaded.model_config, config.decode.max_len_offset
    out_len = mc.max_len
    max_lengths = np.array([min(len(x) - 1 + offset, out_len) for x in src], np.int32)
    out = decode.generate(loaded.params, pad_batch(src, max(map(len, src))), max_lengths,
                          jax.random.key(0), config=mc, decoding=decoding, max_len=out_len)
    return [_until_eos(row) for row in np.asarray(out)]


def _theirs(run, translator, **options):
    loaded, config, src, _ = run
    tok, offset = loaded.tokenizer, config.decode.max_len_offset
    vocab = {p: i for i, p in enumerate(mapping.vocabulary(tok, loaded.model_config.vocab_size))}
    out = []
    for ids, pieces in zip(src, _pieces(tok, src), strict=True):
        # Our limit: the source length without its EOS plus the offset, EOS not counted.
        limit = min(len(ids) - 1 + offset, loaded.model_config.max_len)
        result = translator.translate_batch(
            [pieces], max_decoding_length=limit, suppress_sequences=[["<pad>"]],
            **options)[0]
        out.append([vocab[p] for p in result.hypotheses[0]])
    return out


def _score_gap(run, translator):
    """The largest |CTranslate2's log-probability - ours| of a forced target's tokens."""
    loaded, _, src, tgt = run
    tok, mc = loaded.tokenizer, loaded.model_config
    logits = Transformer(mc.replace(deterministic=True)).apply(
        {"params": loaded.params}, pad_batch(src, max(map(len, src))),
        pad_batch(tgt, max(map(len, tgt))))
    ours = np.asarray(jax.nn.log_softmax(logits))
    scored = translator.score_batch(_pieces(tok, src), _pieces(tok, tgt))
    return max(np.abs(np.asarray(r.log_probs) - ours[i, np.arange(len(t)), t]).max()
               for i, (r, t) in enumerate(zip(scored, tgt, strict=True)))


@pytest.fixture(scope="module")
def greedy(run):
    return _ours(run, decode.DecodeConfig(strategy="greedy"))


@pytest.mark.slow
def test_scores_greedy_and_beam_match_ours(run, greedy, tmp_path):
    translator = _export(run, tmp_path / "ct2")
    gap = _score_gap(run, translator)
    assert gap < 1e-4, gap
    assert _theirs(run, translator, beam_size=1) == greedy
    d = run[1].decode
    beam = _ours(run, decode.DecodeConfig(strategy="beam", beam_size=4, alpha=d.alpha))
    theirs = _theirs(run, translator, beam_size=4, length_penalty=d.alpha)
    assert sum(a == b for a, b in zip(beam, theirs, strict=True)) >= 95


def test_a_wrong_mapping_fails_the_checks(run, greedy, tmp_path):
    loaded = run[0]
    mc = loaded.model_config
    # Sines and cosines swapped: channel 2i holds the cosine.
    swap = np.arange(mc.d_model).reshape(-1, 2)[:, ::-1].reshape(-1)
    table = mapping.layers_of(loaded.params, mc).source_positions[:, swap]
    assert _score_gap(run, _export(run, tmp_path / "positions", positions=table)) > 1e-2
    # End of sentence exchanged with the piece our greedy translations emit most (a model of
    # 30 steps may emit neither end of sentence nor unknown, and exchanging those two would
    # then leave its translations as they were).
    emitted = [i for row in greedy for i in row]
    common = int(np.bincount(emitted).argmax()) if emitted else UNK_ID
    order = np.arange(mc.vocab_size)
    order[[EOS_ID, common]] = order[[common, EOS_ID]]
    wrong_ids = _export(run, tmp_path / "ids", id_order=order)
    assert _score_gap(run, wrong_ids) > 1e-2
    assert _theirs(run, wrong_ids, beam_size=1) != greedy


def test_the_command_writes_a_translator_directory(run, trained_workdir, tmp_path):
    out = tmp_path / "int8"
    ran = run_command("export", "ctranslate2", f"--workdir={trained_workdir}", f"--out={out}",
                      "--average=1", "--quantization=int8")
    assert ran.returncode == 0, ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8"]  # nothing left beside
    assert (out / "README.md").is_file()
    tok = run[0].tokenizer
    assert (out / "spm.model").read_bytes() == tok.path.read_bytes()
    translator = ctranslate2.Translator(str(out), device="cpu", compute_type="int8")
    result = translator.translate_batch(_pieces(tok, run[2][:2]), beam_size=1,
                                        max_decoding_length=10)
    assert all(r.hypotheses[0] for r in result)
