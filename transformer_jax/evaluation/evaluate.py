"""Evaluation: translating sentences, BLEU two ways, perplexity, and the evaluate command.

    python -m transformer_jax.evaluate --workdir=runs/base --split=test --average=5 \
        [--config.decode.beam_size=4 --config.decode.alpha=0.6 ...]

rebuilds the model from the workdir's ``config.json`` and the vocabulary size saved with its
checkpoints, averages the parameters of the last N checkpoints (default: the config's
number, 5 for base and 20 for big, or every checkpoint the workdir holds if fewer;
``--average=1``: the latest alone; the checkpoints averaged are printed, with a warning when
they reach back into early training),
and reports on the split

* perplexity (per target subword token, sentences truncated to ``data.max_len``);
* BLEU with sacreBLEU on detokenized text, with its signature -- the number to compare with
  other systems today;
* the paper-comparable tokenized BLEU: hypotheses and references normalised and tokenized
  with the Moses tokenizer (sacremoses), hyphenated compounds split as ``##AT##-##AT##``,
  scored on those tokens (tensor2tensor's ``get_ende_bleu.sh``, fairseq's
  ``compound_split_bleu.sh``). The 2017 papers reported this figure; it runs higher than
  sacreBLEU's, because splitting compounds adds easy-to-match tokens.

It writes ``<workdir>/eval/<split>-avg<N>-<search>.hyp.txt`` (one hypothesis per line) and
``<workdir>/eval/<split>-avg<N>-<search>.json`` (the scores, signatures and settings), where
``<search>`` is ``beam4``, ``greedy`` or ``sample``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
import sacrebleu
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from transformer_jax import config as config_lib
from transformer_jax.data import pipeline, sources
from transformer_jax.data.pipeline import pad_batch
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.decoding import decode
from transformer_jax.errors import UserError
from transformer_jax.io import checkpoints, layout, metric_keys, storage
from transformer_jax.model import losses, params as params_lib
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer

LENGTH_BUCKET = 16  # source and output lengths are rounded up to this, to bound recompilations

# ----------------------------------------------------------------------------------------
# BLEU, two ways, and perplexity


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU on detokenized text (its default 13a tokenization): (score, signature)."""
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())


def paired_bootstrap(systems: Sequence[tuple[str, Sequence[str]]], references: Sequence[str],
                     n_samples: int = 1000) -> dict[str, tuple[float, float | None]]:
    """sacreBLEU's paired bootstrap resampling test (Koehn, 2004) of each system against the
    first, the baseline, on the same sentences: {name: (BLEU, p-value)}, the baseline's
    p-value None. The p-value is the probability of a difference at least as large as the
    observed one were the systems equally good; sacreBLEU fixes its resampling seed
    (SACREBLEU_SEED, 12345 by default), so the test repeats exactly.

    A system whose translations are the baseline's, sentence for sentence, gets p = 1:
    sacreBLEU's test (after MultEval) counts a zero difference as never due to chance and
    would give it the smallest p-value instead.
    """
    from sacrebleu.significance import PairedTest

    metric = sacrebleu.metrics.BLEU(references=[list(references)])
    test = PairedTest([(name, list(hyps)) for name, hyps in systems], {"BLEU": metric},
                      references=None, test_type="bs", n_samples=n_samples)
    _, results = test()
    out = {name: (r.score, r.p_value) for name, r in zip(results["System"], results["BLEU"],
                                                         strict=True)}
    baseline = list(systems[0][1])
    for name, hyps in systems[1:]:
        if list(hyps) == baseline:
            out[name] = (out[name][0], 1.0)
    return out


def compound_split(text: str) -> str:
    """Splits hyphenated compounds of tokenized text: "rich-text" -> "rich ##AT##-##AT## text".

    The substitution s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g of the 2017 evaluation scripts,
    quirks included: matches do not overlap, so "a-b-c" keeps its second hyphen.
    """
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text)


@functools.cache
def _moses(lang: str) -> tuple[MosesPunctNormalizer, MosesTokenizer]:
    return MosesPunctNormalizer(lang), MosesTokenizer(lang)


def tokenize_for_bleu(text: str, lang: str = "de") -> str:
    """The tokenized-BLEU preprocessing of one sentence: Unicode punctuation replaced by
    ASCII (Moses' replace-unicode-punctuation), Moses-tokenized (tokenizer.perl -l LANG:
    hyphens inside words stay, special characters escaped), compounds split."""
    normalizer, tokenizer = _moses(lang)
    tokens = tokenizer.tokenize(normalizer.replace_unicode_punct(text), return_str=True)
    return compound_split(tokens)


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                   lang: str = "de") -> tuple[float, str]:
    """The paper-comparable BLEU: (score, signature) of sacreBLEU with tokenize="none" on
    :func:`tokenize_for_bleu` of both sides (as multi-bleu.perl would score them)."""
    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    score = metric.corpus_score([tokenize_for_bleu(h, lang) for h in hypotheses],
                                [[tokenize_for_bleu(r, lang) for r in references]])
    return score.score, f"{metric.get_signature()}|moses:{lang}|compound-split:##AT##"


def perplexity(nll_sum: float, tokens: float) -> float:
    """exp(mean negative log-likelihood per target token)."""
    return math.exp(nll_sum / max(tokens, 1.0))


def loss_over_batches(batch_sums: Callable[[Any], dict[str, Any]],
                      batches: Iterable[Any]) -> dict[str, float]:
    """Loss and NLL per target token, perplexity and target tokens over ``batches``.

    ``batch_sums(batch)`` gives one batch's summed loss, NLL and target tokens (``loss_sum``,
    ``nll_sum``, ``tokens``): the training loop's validation and the evaluate command's
    perplexity both reduce them here.
    """
    totals = {"loss_sum": 0.0, "nll_sum": 0.0, "tokens": 0.0}
    for batch in batches:
        sums = batch_sums(batch)
        for k in totals:
            totals[k] += float(sums[k])
    n = max(totals["tokens"], 1.0)
    return {metric_keys.LOSS: totals["loss_sum"] / n, metric_keys.NLL: totals["nll_sum"] / n,
            metric_keys.PERPLEXITY: perplexity(totals["nll_sum"], n),
            metric_keys.TOKENS: totals["tokens"]}


@functools.partial(jax.jit, static_argnames="config")
def _sums(params: Any, batch: dict[str, jax.Array], *,
          config: TransformerConfig) -> dict[str, jax.Array]:
    """Summed loss (unsmoothed), NLL and target tokens of one packed batch."""
    model = Transformer(config.replace(deterministic=True, decode=False))
    return losses.batch_sums(params, batch, model=model, label_smoothing=0.0)


def split_perplexity(params: Any, config: TransformerConfig,
                     batches: Iterable[dict[str, np.ndarray]]) -> dict[str, float]:
    """Perplexity (with NLL per token and target tokens) of the model on packed batches
    (``pipeline.eval_batches``) of a split."""
    return loss_over_batches(functools.partial(_sums, params, config=config), batches)


# ----------------------------------------------------------------------------------------
# Translation


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def translate(params: Any, config: TransformerConfig, tokenizer: Tokenizer,
              sentences: Sequence[str], decoding: decode.DecodeConfig,
              progress: Callable[[int], None] | None = None) -> list[str]:
    """Translations of ``sentences``, in their order, with the strategy of ``decoding``.

    Sentences are decoded in batches of ``decoding.batch_size`` of similar length. A
    translation may be up to ``decoding.max_len_offset`` tokens longer than its source (the
    paper's rule: input length + 50), within the model's ``max_len``; sources longer than
    that are truncated. Empty or whitespace-only inputs give empty outputs.
    ``progress(n)`` is called as each batch of n sentences is done.
    """
    encoded = [tokenizer.encode(s)[: config.max_len] if s.strip() else [] for s in sentences]
    order = sorted((i for i in range(len(sentences)) if encoded[i]),
                   key=lambda i: len(encoded[i]))
    results = [""] * len(sentences)
    if progress is not None and len(order) < len(sentences):
        progress(len(sentences) - len(order))
    # One batch shape for the whole call: one compilation per length bucket.
    rows = max(min(decoding.batch_size, len(order)), 1)
    base_key = jax.random.key(decoding.seed)
    # The fields that shape the computation: changing the others compiles nothing anew.
    graph = decoding.replace(seed=0, batch_size=0, max_len_offset=0)
    for number, start in enumerate(range(0, len(order), rows)):
        idx = order[start:start + rows]
        src_len = min(_round_up(max(len(encoded[i]) for i in idx), LENGTH_BUCKET),
                      config.max_len)
        out_len = min(_round_up(src_len + decoding.max_len_offset, LENGTH_BUCKET),
                      config.max_len)
        batch = [encoded[i] for i in idx] + [[]] * (rows - len(idx))
        # The source length without its EOS, plus the offset; 0 for the filler rows.
        max_lengths = np.array([min(len(ids) - 1 + decoding.max_len_offset, out_len)
                                for ids in batch[: len(idx)]] + [0] * (rows - len(idx)),
                               np.int32)
        outputs = np.asarray(decode.generate(
            params, pad_batch(batch, src_len), max_lengths,
            jax.random.fold_in(base_key, number), config=config, decoding=graph,
            max_len=out_len))
        for row, i in enumerate(idx):
            results[i] = tokenizer.decode(outputs[row])
        if progress is not None:
            progress(len(idx))
    return results


# ----------------------------------------------------------------------------------------
# A workdir's model


@dataclasses.dataclass
class Loaded:
    """What decoding needs from a workdir: parameters, model, vocabulary."""

    params: Any
    model_config: TransformerConfig
    tokenizer: Tokenizer
    steps: list[int]  # the checkpoints whose parameters were averaged (one: not averaged)
    notes: list[str] = dataclasses.field(default_factory=list)  # one-line warnings for the user


def load_workdir(workdir: storage.PathLike, config: ml_collections.ConfigDict,
                 average: int | None = None) -> Loaded:
    """The model of a training run: ``config`` is the run's config (``resume.workdir_config``);
    the parameters are the mean of the last ``average`` checkpoints (1: the latest alone).
    ``average=None`` takes the config's number (``config.checkpoints_to_average``: 5 for
    base, 20 for big), or every checkpoint the workdir holds if fewer, saying so in
    ``notes``. Raises UserError if ``average`` is more than the workdir holds."""
    workdir = storage.path(workdir)
    vocab = workdir / layout.VOCAB / layout.VOCAB_MODEL
    if not vocab.is_file():
        raise UserError(f"{vocab}: no vocabulary; --workdir must be the workdir of a training "
                        "run")
    if not (workdir / layout.CHECKPOINTS).is_dir():
        raise UserError(f"{workdir / 'checkpoints'}: no checkpoints; train first")
    ckpts = checkpoints.Checkpoints(workdir, config.train.keep_checkpoints)
    notes: list[str] = []
    try:
        steps = ckpts.all_steps()
        if not steps:
            raise UserError(f"{ckpts.directory}: no checkpoints; train first")
        meta = ckpts.read_meta(steps[-1])
        model_config = TransformerConfig.from_config(config.model, int(meta["vocab_size"]))
        template = params_lib.param_shapes(model_config)
        if average is None:
            params, used, notes = ckpts.average_last(
                template, config_lib.checkpoints_to_average(config))
        elif average == 1:
            params, used = ckpts.restore_params(steps[-1], template), [steps[-1]]
        elif average > 1:
            params, used = ckpts.average_params(template, average)
            notes = [n for n in [checkpoints.early_span(used)] if n]
        else:
            raise UserError(f"--average={average} must be >= 1")
    finally:
        ckpts.close()
    logging.info("model from %s: checkpoint(s) %s", workdir, ", ".join(map(str, used)))
    return Loaded(params, model_config, Tokenizer(vocab), used, notes)


# ----------------------------------------------------------------------------------------
# The evaluate command


def evaluate_workdir(workdir: storage.PathLike, config: ml_collections.ConfigDict, split: str,
                     average: int | None = None, limit: int = 0,
                     progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Perplexity and BLEU (both ways) of a workdir's model on ``split`` (``average`` as in
    :func:`load_workdir`); writes the hypotheses and the scores under ``<workdir>/eval/``.
    Returns the scores, the averaged checkpoints and any notes about them."""
    if split not in ("validation", "test"):
        raise UserError(f"--split={split!r} is not one of validation, test")
    start = time.time()
    loaded = load_workdir(workdir, config, average)
    source = sources.get_source(config.data, split)
    n = min(limit, len(source)) if limit else len(source)
    pairs = [source[i] for i in range(n)]
    rows = pipeline.rows_per_batch(config.data.tokens_per_batch, config.data.max_len, 1)
    ppl = split_perplexity(loaded.params, loaded.model_config, pipeline.eval_batches(
        pairs, loaded.tokenizer, max_len=config.data.max_len, rows=rows))
    decoding = decode.DecodeConfig.from_config(config.decode)
    hyps = translate(loaded.params, loaded.model_config, loaded.tokenizer,
                     [s for s, _ in pairs], decoding, progress)
    refs = [t for _, t in pairs]
    sacre, sacre_signature = bleu(hyps, refs)
    tok, tok_signature = tokenized_bleu(hyps, refs, config.data.target_lang)
    result = {
        "split": split, "sentences": n, "checkpoints": loaded.steps,
        "average": len(loaded.steps), "notes": loaded.notes,
        "perplexity": ppl["perplexity"], "target_tokens": ppl["tokens"],
        "bleu": sacre, "bleu_signature": sacre_signature,
        "tokenized_bleu": tok, "tokenized_bleu_signature": tok_signature,
        "decode": dataclasses.asdict(decoding), "seconds": time.time() - start,
    }
    out = storage.path(workdir) / "eval"
    out.mkdir(exist_ok=True)
    tag = f"beam{decoding.beam_size}" if decoding.strategy == "beam" else decoding.strategy
    name = f"{split}-avg{len(loaded.steps)}-{tag}"
    storage.write_atomically(out / f"{name}.hyp.txt", "".join(h + "\n" for h in hyps))
    storage.write_atomically(out / f"{name}.json", json.dumps(result, indent=2) + "\n")
    result["files"] = [str(out / f"{name}.hyp.txt"), str(out / f"{name}.json")]
    return result


def describe(decoding: dict[str, Any]) -> str:
    """The decoding settings in a few words, e.g. "beam 4, alpha 0.6, offset 50"."""
    d = decoding
    if d["strategy"] == "beam":
        how = f"beam {d['beam_size']}, alpha {d['alpha']}"
    elif d["strategy"] == "sample":
        how = f"sampling, temperature {d['temperature']}, top-k {d['top_k']}, top-p {d['top_p']}"
    else:
        how = "greedy"
    return f"{how}, max length input + {d['max_len_offset']}"
