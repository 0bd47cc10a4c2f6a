"""What a run reports besides its step metrics: BLEU of validation sentences as it trains,
the test sentences decoded at the end (both BLEUs, the hypotheses and references written,
samples), and the hyperparameters TensorBoard shows."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

from transformer_jax.data import sources, tokenizer as tokenizer_lib
from transformer_jax.evaluation import bleu, perplexity, sentence_stats, translation
from transformer_jax.io import layout, metric_keys, storage, workdirs
from transformer_jax.io.logs import MetricWriter
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training.spec import EvalSpec


def validation_bleu(evaluation: EvalSpec, model_config: TransformerConfig,
                    params: Any, tokenizer: tokenizer_lib.Tokenizer,
                    source: Any) -> dict[str, float]:
    """sacreBLEU of the first ``train.bleu_sentences`` of the validation split, decoded as
    the ``decode`` section says."""
    pairs = [source[i] for i in range(min(evaluation.bleu_sentences, len(source)))]
    hyps = translation.translate(params, model_config, tokenizer, [s for s, _ in pairs],
                                 evaluation.decode)
    return {metric_keys.BLEU: bleu.bleu(hyps, [t for _, t in pairs])[0]}


# The end-of-training test hypotheses and their references, one sentence a line (relative to
# the workdir): for significance tests between runs.


def final_translations(evaluation: EvalSpec, test_split: sources.SourceSpec,
                       model_config: TransformerConfig,
                       params: Any, tokenizer: tokenizer_lib.Tokenizer, writer: MetricWriter,
                       step: int, workdir: storage.Path, is_chief: bool = True) -> dict[str, Any]:
    """Decodes the first sentences of the test split: both BLEUs, the hypotheses and
    references written to layout.FINAL_HYPOTHESES and layout.FINAL_REFERENCES, and a few samples."""
    test = sources.get_source(test_split, "test")
    n = min(max(evaluation.bleu_sentences, evaluation.samples), len(test))
    pairs = [test[i] for i in range(n)]
    start = time.time()
    decoding = evaluation.decode
    hyps = translation.translate(params, model_config, tokenizer, [s for s, _ in pairs],
                                 decoding)
    refs = [t for _, t in pairs]
    result: dict[str, Any] = {}
    if evaluation.bleu_sentences:
        score, signature = bleu.bleu(hyps, refs)
        tokenized, tokenized_signature = bleu.tokenized_bleu(hyps, refs,
                                                             test_split.target_lang)
        k = metric_keys
        result = {k.TEST_BLEU: score, k.BLEU_SIGNATURE: signature,
                  k.TEST_BLEU_TOKENIZED: tokenized,
                  k.BLEU_TOKENIZED_SIGNATURE: tokenized_signature, k.BLEU_SENTENCES: n,
                  k.TEST_HYPOTHESES: layout.FINAL_HYPOTHESES,
                  k.TEST_REFERENCES: layout.FINAL_REFERENCES}
        if is_chief:
            (workdir / layout.EVAL).mkdir(exist_ok=True)
            for name, lines in ((layout.FINAL_HYPOTHESES, hyps), (layout.FINAL_REFERENCES, refs)):
                storage.write_atomically(workdir / name, "".join(
                    line.replace("\n", " ") + "\n" for line in lines))
        result["translation_stats"] = sentence_stats.translation_stats(hyps, refs)
        writer.write(k.TEST, step, {k.BLEU: score, k.BLEU_TOKENIZED: tokenized})
        logging.info("test BLEU %.2f (tokenized, compound-split: %.2f) on %d sentences (%s, "
                     "%.1fs)  %s", score, tokenized, n,
                     translation.describe(dataclasses.asdict(decoding)), time.time() - start,
                     signature)
    for (src, ref), hyp in list(zip(pairs, hyps, strict=True))[: evaluation.samples]:
        writer.sample(src, ref, hyp)
    return result


def write_sentence_stats(evaluation: EvalSpec, model_config: TransformerConfig,
                         params: Any, eval_source: Any, tokenizer: tokenizer_lib.Tokenizer,
                         max_len: int, workdir: storage.Path,
                         translation_stats: dict[str, Any] | None, is_chief: bool = True) -> None:
    """The run's sentence statistics (evaluation/sentence_stats.py) to
    layout.SENTENCE_STATS: each validation sentence's NLL and tokens (``eval_source`` None:
    left out, the validation having covered part of the split), and the test translations'
    BLEU and chrF statistics when they were decoded."""
    start = time.time()
    arrays = dict(translation_stats or {})
    if eval_source is not None:
        nll, tokens = perplexity.sentence_nll(params, model_config, eval_source, tokenizer,
                                              max_len=max_len)
        arrays.update({sentence_stats.NLL: nll, sentence_stats.TOKENS: tokens})
    if not is_chief or not arrays:
        return
    (workdir / layout.EVAL).mkdir(exist_ok=True)
    storage.write_atomically(workdir / layout.SENTENCE_STATS, sentence_stats.dumps(arrays))
    if sentence_stats.NLL in arrays:
        logging.info("sentence statistics of %d validation and %d test sentences written to %s "
                     "(validation PPL from them %.4f, %.1fs)", len(arrays[sentence_stats.NLL]),
                     len(arrays.get(sentence_stats.BLEU, ())), layout.SENTENCE_STATS,
                     sentence_stats.perplexity(arrays[sentence_stats.NLL],
                                               arrays[sentence_stats.TOKENS]),
                     time.time() - start)
    else:
        logging.info("sentence statistics of %d test sentences written to %s (the validation's "
                     "perplexity covered part of its split, train.eval_batches=%d: its "
                     "sentences left out)", len(arrays.get(sentence_stats.BLEU, ())),
                     layout.SENTENCE_STATS, evaluation.batches)


def hparams(table3: Mapping[str, Any], seeds: Mapping[str, Any], variant: str,
            workdir: storage.Path) -> dict[str, Any]:
    """The hyperparameters TensorBoard shows for this run: the values its sweep point swept
    (``sweep_point.json``) and its seeds, or the ``table3`` quantities and seeds of a run
    outside a sweep."""
    record = workdirs.read_object(workdir / layout.SWEEP_POINT) or {}
    fields = record.get("fields")
    values = dict(fields) if isinstance(fields, dict) else {}
    if not values:
        values = dict(table3)
    values.pop("seed", None)
    values.update(seeds)
    values.setdefault("variant", variant)
    return values
