"""BLEU two ways: sacreBLEU on detokenized text, and the paper-comparable tokenized BLEU.

* :func:`bleu` -- sacreBLEU on detokenized text, with its signature: the number to compare
  with other systems today;
* :func:`tokenized_bleu` -- hypotheses and references normalised and tokenized with the
  Moses tokenizer (sacremoses), hyphenated compounds split as ``##AT##-##AT##``, scored on
  those tokens (tensor2tensor's ``get_ende_bleu.sh``, fairseq's ``compound_split_bleu.sh``).
  The 2017 papers reported this figure; it runs higher than sacreBLEU's, because splitting
  compounds adds easy-to-match tokens.

Whether two settings' BLEU differ is judged with the training run as the unit, by
:mod:`transformer_jax.evaluation.significance`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import sacrebleu
from sacremoses import MosesPunctNormalizer, MosesTokenizer


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """sacreBLEU on detokenized text (its default 13a tokenization): (score, signature)."""
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())


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

