"""The evaluate command's work: a trained workdir's model scored on a split.

    python -m transformer_jax.evaluate --workdir=runs/base --split=test --average=5 \
        [--config.decode.beam_size=4 --config.decode.alpha=0.6 ...]

rebuilds the model from the workdir's ``config.json`` and the vocabulary size saved with its
checkpoints, averages the parameters of the last N checkpoints (default: the config's
number, 5 for base and 20 for big, or every checkpoint the workdir holds if fewer;
``--average=1``: the latest alone; the checkpoints averaged are printed, with a warning when
they reach back into early training),
and reports on the split

* perplexity (per target subword token, sentences truncated to ``data.max_len``);
* BLEU two ways (:mod:`transformer_jax.evaluation.bleu`): sacreBLEU on detokenized text,
  with its signature, and the paper-comparable tokenized, compound-split BLEU; sources longer
  than the model's ``max_len`` are shortened to it for translation, and listed in the result
  (``shortened_sources``: their numbers in the split, from 1, and lengths in tokens).

It writes ``<workdir>/eval/<split>-avg<N>-<search>.hyp.txt`` (one hypothesis per line) and
``<workdir>/eval/<split>-avg<N>-<search>.json`` (the scores, signatures and settings), where
``<search>`` is ``beam4``, ``greedy`` or ``sample``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from transformer_jax.data import batching, pipeline, sources, tokens
from transformer_jax.decoding import strategies
from transformer_jax.errors import UserError
from transformer_jax.evaluation.bleu import bleu, tokenized_bleu
from transformer_jax.evaluation.perplexity import split_perplexity
from transformer_jax.evaluation.restore import WorkdirSpec, load_workdir
from transformer_jax.evaluation.translation import long_inputs, source_ids, translate
from transformer_jax.io import layout, storage


def evaluate_workdir(workdir: storage.PathLike, run: WorkdirSpec, data: pipeline.DataSpec,
                     split: str,
                     average: int | None = None, limit: int = 0,
                     progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Perplexity and BLEU (both ways) of a workdir's model on ``split`` (``run``, the spec of
    its config, and ``average`` as in :func:`load_workdir`; ``data``, its data's spec);
    writes the hypotheses and the scores under ``<workdir>/eval/``. Returns the scores, the
    averaged checkpoints and any notes about them."""
    if split not in ("validation", "test"):
        raise UserError(f"--split={split!r} is not one of validation, test")
    start = time.time()
    loaded = load_workdir(workdir, run, average)
    out = storage.check(storage.path(workdir) / layout.EVAL, "the evaluation's folder")
    source = sources.get_source(data.source, split)
    n = min(limit, len(source)) if limit else len(source)
    pairs = tokens.read_pairs(source, range(n))
    # The split's ids from the token cache the run's training wrote or shares (written now
    # if there is none): for perplexity and as the sentences to translate.
    ids = tokens.Head(pipeline.split_ids(data, workdir, split, loaded.tokenizer, source), n)
    rows = batching.rows_per_batch(data.batch.tokens_per_batch, data.batch.max_len, 1)
    ppl = split_perplexity(loaded.params, loaded.model_config, batching.eval_batches(
        ids, None, max_len=data.batch.max_len, rows=rows))
    sentences = [s for s, _ in pairs]
    inputs = source_ids(loaded.tokenizer, sentences, ids.read_ids(range(n))[0].tolist())
    decoding = run.decode
    limit = loaded.model_config.max_len
    long = long_inputs(loaded.tokenizer, sentences, limit, inputs)
    hyps = translate(loaded.params, loaded.model_config, loaded.tokenizer, sentences, decoding,
                     progress, inputs)
    refs = [t for _, t in pairs]
    sacre, sacre_signature = bleu(hyps, refs)
    tok, tok_signature = tokenized_bleu(hyps, refs, run.target_lang)
    result = {
        "split": split, "sentences": n, "checkpoints": loaded.steps,
        "average": len(loaded.steps), "notes": loaded.notes,
        "perplexity": ppl["perplexity"], "target_tokens": ppl["tokens"],
        "bleu": sacre, "bleu_signature": sacre_signature,
        "tokenized_bleu": tok, "tokenized_bleu_signature": tok_signature,
        "decode": dataclasses.asdict(decoding), "seconds": time.time() - start,
        # The sources longer than the model takes, shortened to its limit for translation.
        "source_limit": limit, "shortened_sources": [dataclasses.asdict(x) for x in long],
    }
    beams = strategies.get(decoding.strategy).traits.beams
    tag = f"{decoding.strategy}{decoding.beam_size}" if beams else decoding.strategy
    name = f"{split}-avg{len(loaded.steps)}-{tag}"
    storage.write_atomically(out / f"{name}.hyp.txt", "".join(h + "\n" for h in hyps))
    storage.write_atomically(out / f"{name}.json", json.dumps(result, indent=2) + "\n")
    result["files"] = [str(out / f"{name}.hyp.txt"), str(out / f"{name}.json")]
    return result



def write_sentence_stats(workdir: storage.PathLike, run: WorkdirSpec,
                         data: pipeline.DataSpec) -> dict[str, Any]:
    """A finished run's sentence statistics (evaluation/sentence_stats.py), written to
    layout.SENTENCE_STATS as the end of training writes them: the validation split's NLL
    under the parameters training evaluated (``train.average_checkpoints``) and the BLEU
    and chrF statistics of the test translations it saved. For runs trained before the end
    of training wrote them. Returns {validation_ppl, sentences, test_sentences, checkpoints}."""
    from transformer_jax.evaluation import perplexity as perplexity_lib, sentence_stats

    workdir = storage.path(workdir)
    files = [workdir / layout.FINAL_HYPOTHESES, workdir / layout.FINAL_REFERENCES]
    missing = [str(f) for f in files if storage.not_a_file(f)]
    if missing:
        raise UserError(f"{missing[0]}: no test translations of the end of training; the run "
                        "has not finished, or translated no test sentences")
    hyps, refs = (f.read_text(encoding="utf-8").splitlines() for f in files)
    if len(hyps) != len(refs):
        raise UserError(f"{files[0]} has {len(hyps)} lines but {files[1]} {len(refs)}")
    loaded = load_workdir(workdir, run, run.average)
    source = sources.get_source(data.source, "validation")
    ids = pipeline.split_ids(data, workdir, "validation", loaded.tokenizer, source)
    nll, counts = perplexity_lib.sentence_nll(loaded.params, loaded.model_config, ids, None,
                                              max_len=data.batch.max_len)
    arrays = {sentence_stats.NLL: nll, sentence_stats.TOKENS: counts,
              **sentence_stats.translation_stats(hyps, refs)}
    storage.write_atomically(workdir / layout.SENTENCE_STATS, sentence_stats.dumps(arrays))
    return {"validation_ppl": sentence_stats.perplexity(nll, counts), "sentences": len(nll),
            "test_sentences": len(hyps), "checkpoints": loaded.steps}
