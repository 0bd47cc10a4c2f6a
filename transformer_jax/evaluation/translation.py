"""Translating sentences with a model's parameters, in batches of similar length; the
sources longer than the model takes, found and named before any is shortened."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from transformer_jax.data.batching import pad_batch
from transformer_jax.data.tokenizer import EOS_ID, Tokenizer
from transformer_jax.decoding import decode, strategies
from transformer_jax.errors import DataError, UserError
from transformer_jax.model.spec import TransformerConfig

LENGTH_BUCKET = 16  # source and output lengths are rounded up to this, to bound recompilations


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class LongInput:
    """A source longer than a limit: its number among the inputs (from 1) and its length in
    tokens, as the model takes it (its SentencePiece pieces and the end-of-sentence token)."""

    number: int
    tokens: int


def source_ids(tokenizer: Tokenizer, sentences: Sequence[str],
               cached: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """The ids of each source, ending with EOS; none for an empty or blank line. ``cached``:
    the sentences' ids read from the token cache, taken instead of tokenizing them."""
    if cached is None:
        return [tokenizer.encode(s) if s.strip() else [] for s in sentences]
    return [list(ids) if s.strip() else [] for s, ids in zip(sentences, cached, strict=True)]


def long_inputs(tokenizer: Tokenizer, sentences: Sequence[str], limit: int,
                ids: Sequence[Sequence[int]] | None = None) -> list[LongInput]:
    """The sources of more than ``limit`` tokens, in input order (``ids``: their
    :func:`source_ids`, when known)."""
    ids = source_ids(tokenizer, sentences) if ids is None else ids
    return [LongInput(number, len(x)) for number, x in enumerate(ids, start=1) if len(x) > limit]


def shorten(ids: list[int], limit: int) -> list[int]:
    """A source of more than ``limit`` ids cut to its first ``limit - 1`` and EOS, so that
    it ends as every sentence the model was trained on does."""
    return ids if len(ids) <= limit else [*ids[: limit - 1], EOS_ID]


def input_limit(model_max_len: int, max_input_len: int | None = None) -> int:
    """The longest source, in tokens, that is translated whole: the model's ``max_len``, or
    ``max_input_len`` when given (at most the model's; UserError otherwise)."""
    if max_input_len is None:
        return model_max_len
    if not 1 <= max_input_len <= model_max_len:
        raise UserError(f"--max_input_len={max_input_len} must be between 1 and the model's "
                        f"limit of {model_max_len} tokens (model.max_len)")
    return max_input_len


def shortened_report(where: str, long: Sequence[LongInput], of: int, what: str,
                     limit: int) -> list[str]:
    """The lines announcing the sources ``long`` shortened to the model's ``limit``: one each
    (``where`` names it: "src.txt line"), then how many of the ``of`` sources (``what``:
    "lines") were; none when there are none."""
    lines = [f"warning: {where} {x.number}: {x.tokens} tokens, more than the model's {limit}; "
             f"shortened to its first {limit - 1} and the end-of-sentence token" for x in long]
    if long:
        lines.append(f"warning: {len(long)} of {of} {what} shortened to the model's limit of "
                     f"{limit} tokens")
    return lines


def refuse_long(where: str, long: Sequence[LongInput], limit: int) -> None:
    """DataError naming the first of the sources ``long`` (longer than ``--max_input_len``
    = ``limit``) and how many there are; nothing when there are none."""
    if long:
        first = long[0]
        more = f" (and {len(long) - 1} more)" if len(long) > 1 else ""
        raise DataError(f"{where} {first.number}: {first.tokens} tokens, more than "
                        f"--max_input_len={limit}{more}")


def translate(params: Any, config: TransformerConfig, tokenizer: Tokenizer,
              sentences: Sequence[str], decoding: decode.DecodeConfig,
              progress: Callable[[int], None] | None = None,
              ids: Sequence[Sequence[int]] | None = None) -> list[str]:
    """Translations of ``sentences``, in their order, with the strategy of ``decoding``.

    Sentences are decoded in batches of ``decoding.batch_size`` of similar length. A
    translation may be up to ``decoding.max_len_offset`` tokens longer than its source (the
    paper's rule: input length + 50), within the model's ``max_len``; sources longer than
    that are shortened (:func:`shorten`), which the commands announce first
    (:func:`long_inputs`). Empty or whitespace-only inputs give empty outputs.
    ``progress(n)`` is called as each batch of n sentences is done; ``ids``: the sentences'
    :func:`source_ids`, when known.
    """
    ids = source_ids(tokenizer, sentences) if ids is None else ids
    encoded = [shorten(list(x), config.max_len) for x in ids]
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


def describe(decoding: dict[str, Any]) -> str:
    """The decoding settings in a few words, e.g. "beam 4, alpha 0.6, offset 50"."""
    d = decoding
    how = strategies.get(d["strategy"]).module.describe(d)
    scale = d.get("position_scale", 1.0)
    return (f"{how}, max length input + {d['max_len_offset']}"
            + (f", positions x {scale:g}" if scale != 1.0 else ""))
