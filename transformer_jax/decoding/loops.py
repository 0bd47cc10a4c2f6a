"""The searches, greedy, sampling and beam search, written against one step function,
``tokens_to_logits(ids, cache) -> (logits, cache)``: the previous token of every sequence [n]
and a cache pytree in, the next-token logits [n, V] and the updated cache out. The model's
step functions are ``decode.py``'s; any other (a hand-set table in the tests) drives the same
searches. They run in :class:`Phases` of growing cache length when given them.

Shapes: b = batch, k = beam size, L = maximum output length (the buffer), V = vocabulary.
Outputs are [b, L] ids: the tokens, EOS, then padding (0). A sequence that reaches its own
maximum length ends there without EOS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID

Array = jax.Array
StepFn = Callable[[Array, Any], tuple[Array, Any]]


class Phases(NamedTuple):
    """Decoding in phases of growing cache length.

    Step i attends over cache positions 0..i only, yet a cache of the full L positions costs
    every step its whole length: in the attention (masked to the prefix) and, in beam
    search, in reordering the self-attention keys and values with the beams. In phases, the
    cache starts ``lengths[0]`` long, phase p runs while the step is below ``lengths[p]``,
    then ``grow`` pads the step function's state to the next length. With lengths that
    double, an average step's cache-length work is about 2/3 of a full cache's, and the loop
    compiles once per phase (a handful: log2 of L / the first length).
    """

    lengths: tuple[int, ...]  # increasing, the last = the output buffer L
    grow: Callable[[Any, int], Any]  # (state, longer length) -> state


def _while(cond: Callable[[Any], Array], body: Callable[[Any], Any], state: tuple,
           phases: Phases | None, cache_at: int) -> tuple:
    """``jax.lax.while_loop(cond, body, state)`` for a state whose item 0 is the step and
    item ``cache_at`` the step function's state, run in ``phases`` when given."""
    if phases is None:
        return jax.lax.while_loop(cond, body, state)
    for n, length in enumerate(phases.lengths):
        if n:
            grown = phases.grow(state[cache_at], length)
            state = (*state[:cache_at], grown, *state[cache_at + 1:])
        state = jax.lax.while_loop(lambda s, end=length: cond(s) & (s[0] < end), body, state)
    return state


# ----------------------------------------------------------------------------------------
# Greedy search and sampling


def filter_logits(logits: Array, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0) -> Array:
    """Logits [..., V] divided by ``temperature``, with -inf outside the allowed set.

    top_k > 0 keeps the k largest logits; top_p < 1 keeps the smallest set of most probable
    tokens whose probabilities (after the temperature) sum to at least top_p -- the most
    probable token is always kept. Ties with the last kept value are kept too.
    """
    logits = logits / temperature
    if top_k > 0:
        kth = jax.lax.top_k(logits, top_k)[0][..., -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        ordered = -jnp.sort(-logits, axis=-1)  # descending
        probs = jax.nn.softmax(ordered, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        cutoff = jnp.min(jnp.where(mass_before < top_p, ordered, jnp.inf), axis=-1,
                         keepdims=True)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return logits


def _one_by_one(tokens_to_logits: StepFn, cache: Any, max_lengths: Array, max_len: int,
                choose: Callable[[Array, Array], Array], eos_id: int,
                phases: Phases | None) -> Array:
    """The loop of greedy search and sampling: ``choose(logits [b, V], step)`` -> ids [b]."""
    b = max_lengths.shape[0]

    def body(carry):
        i, cache, last, out, done = carry
        logits, cache = tokens_to_logits(last, cache)  # [b, V]
        token = jnp.where(done, PAD_ID, choose(logits, i).astype(jnp.int32))  # [b]
        out = out.at[:, i].set(token)  # [b, L]
        done = done | (token == eos_id) | (i + 1 >= max_lengths)
        return i + 1, cache, token, out, done

    def cond(carry):
        i, _, _, _, done = carry
        return (i < max_len) & ~jnp.all(done)

    init = (jnp.int32(0), cache, jnp.full((b,), PAD_ID, jnp.int32),
            jnp.zeros((b, max_len), jnp.int32), max_lengths <= 0)
    return _while(cond, body, init, phases, cache_at=1)[3]


def greedy_search(tokens_to_logits: StepFn, cache: Any, max_lengths: Array, max_len: int,
                  eos_id: int = EOS_ID, phases: Phases | None = None) -> Array:
    """The most probable token at every step, until EOS or a sequence's maximum length.

    Args:
      cache: the step function's state, leaves [b, ...].
      max_lengths: [b] the longest output of each sequence (<= max_len).
      eos_id: the end symbol; -1 never ends a sequence early (for benchmarks).
      phases: decode in phases of growing cache (:class:`Phases`); ``cache`` then has the
        first phase's length.
    Returns:
      [b, max_len] ids.
    """
    return _one_by_one(tokens_to_logits, cache, max_lengths, max_len,
                       lambda logits, _: jnp.argmax(logits, axis=-1), eos_id, phases)


def sample_search(tokens_to_logits: StepFn, cache: Any, key: Array, max_lengths: Array,
                  max_len: int, *, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0, eos_id: int = EOS_ID,
                  phases: Phases | None = None) -> Array:
    """Ancestral sampling from the filtered distribution (:func:`filter_logits`) at every
    step; temperature 0 is greedy search. Shapes as :func:`greedy_search`."""
    if temperature == 0.0:
        return greedy_search(tokens_to_logits, cache, max_lengths, max_len, eos_id, phases)

    def choose(logits: Array, step: Array) -> Array:
        filtered = filter_logits(logits, temperature, top_k, top_p)  # [b, V]
        return jax.random.categorical(jax.random.fold_in(key, step), filtered, axis=-1)

    return _one_by_one(tokens_to_logits, cache, max_lengths, max_len, choose, eos_id,
                       phases)


# ----------------------------------------------------------------------------------------
# Beam search


def length_penalty(length: Any, alpha: float) -> Any:
    """GNMT's length penalty lp(Y) = ((5 + |Y|) / 6) ** alpha; a finished hypothesis is
    scored log P(Y | X) / lp(Y). lp(1) = 1 for every alpha; alpha = 0 scores by log P."""
    return ((5.0 + length) / 6.0) ** alpha


def _gather_beams(tree: Any, beam_index: Array, b: int, k: int) -> Any:
    """Reorders the beams of every [b * k, ...] leaf by ``beam_index`` [b, k]; [b, ...]
    leaves (a sentence's cross-attention keys and values, shared by its beams) and scalar
    leaves (step counters) stay as they are."""

    def gather(x: Array) -> Array:
        if x.ndim == 0 or x.shape[0] != b * k:
            if x.ndim and x.shape[0] != b:
                raise ValueError(f"a cache leaf of {x.shape[0]} rows: neither {b} sentences "
                                 f"nor {b} x {k} beams")
            return x
        rows = x.reshape(b, k, *x.shape[1:])
        index = beam_index.reshape(b, k, *([1] * (x.ndim - 1)))
        return jnp.take_along_axis(rows, index, axis=1).reshape(x.shape)

    return jax.tree.map(gather, tree)


def beam_search(tokens_to_logits: StepFn, cache: Any, *, beam_size: int, alpha: float,
                max_lengths: Array, max_len: int, eos_id: int = EOS_ID,
                phases: Phases | None = None) -> tuple[Array, Array]:
    """Beam search with GNMT's length penalty, for a batch of sequences.

    Every step extends each of the k live hypotheses of a sentence by every token and ranks
    the k * V candidates by log-probability. Among the best k, those that end (EOS, or the
    sentence's maximum length reached) are finished and scored log P / lp(length), length
    counting the EOS; the best k that do not end live on. A sentence stops when k hypotheses
    have finished; the search stops when every sentence has. With k = 1 this is greedy
    search exactly.

    Args:
      tokens_to_logits: ids [b * k] (row i * k + j is beam j of sentence i) and cache ->
        (logits [b * k, V], cache).
      cache: the step function's state, leaves [b * k, ...] (reordered with the beams),
        [b, ...] (shared by a sentence's beams) or scalars.
      max_lengths: [b] the longest output of each sentence (<= max_len).
      eos_id: the end symbol; -1 never ends a hypothesis early (for benchmarks).
      phases: decode in phases of growing cache (:class:`Phases`); ``cache`` then has the
        first phase's length.
    Returns:
      (sequences [b, k, max_len], scores [b, k]), best first; -inf marks an empty slot.
    """
    b, k, n_cand = max_lengths.shape[0], beam_size, 2 * beam_size
    neg_inf = jnp.float32(-jnp.inf)
    # Candidates come from the best 2k: at most k of them (one per live beam) can end with
    # EOS, so k that live on are always among them.

    def body(state):
        i, alive_seqs, alive_lp, fin_seqs, fin_scores, done, cache = state
        # alive_seqs, fin_seqs: [b, k, L]; alive_lp, fin_scores: [b, k]; done: [b]
        last = jnp.where(i == 0, PAD_ID, jax.lax.dynamic_index_in_dim(
            alive_seqs, jnp.maximum(i - 1, 0), axis=2, keepdims=False))  # [b, k]
        logits, cache = tokens_to_logits(last.reshape(b * k), cache)  # [b * k, V]
        vocab = logits.shape[-1]
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(b, k, vocab)
        candidates = (alive_lp[:, :, None] + log_probs).reshape(b, k * vocab)  # [b, k * V]
        cand_lp, cand_index = jax.lax.top_k(candidates, n_cand)  # [b, 2k], best first
        cand_beam, cand_token = cand_index // vocab, cand_index % vocab  # [b, 2k]
        cand_seqs = jnp.take_along_axis(alive_seqs, cand_beam[:, :, None], axis=1)
        cand_seqs = cand_seqs.at[:, :, i].set(cand_token)  # [b, 2k, L]

        # Finished: the ending candidates among the best k, scored with the length penalty.
        ends = (cand_token == eos_id) | (i + 1 >= max_lengths)[:, None]  # [b, 2k]
        finishing = (ends & (jnp.arange(n_cand) < k)[None] & ~done[:, None]
                     & jnp.isfinite(cand_lp))
        new_scores = jnp.where(finishing, cand_lp / length_penalty(i + 1.0, alpha), neg_inf)
        fin_scores, fin_index = jax.lax.top_k(
            jnp.concatenate([fin_scores, new_scores], axis=1), k)  # [b, k] of [b, 3k]
        fin_seqs = jnp.take_along_axis(jnp.concatenate([fin_seqs, cand_seqs], axis=1),
                                       fin_index[:, :, None], axis=1)  # [b, k, L]

        # Alive: the best k candidates that do not end.
        alive_lp, alive_index = jax.lax.top_k(jnp.where(ends, neg_inf, cand_lp), k)  # [b, k]
        alive_seqs = jnp.take_along_axis(cand_seqs, alive_index[:, :, None], axis=1)
        cache = _gather_beams(cache, jnp.take_along_axis(cand_beam, alive_index, axis=1), b, k)
        done = done | jnp.isfinite(fin_scores[:, -1]) | (i + 1 >= max_lengths)
        return i + 1, alive_seqs, alive_lp, fin_seqs, fin_scores, done, cache

    def cond(state):
        i, done = state[0], state[5]
        return (i < max_len) & ~jnp.all(done)

    seqs = jnp.zeros((b, k, max_len), jnp.int32)
    # All beams start as the same empty hypothesis: only beam 0 may extend at step 0.
    alive_lp = jnp.tile(jnp.array([0.0] + [-jnp.inf] * (k - 1), jnp.float32), (b, 1))
    state = (jnp.int32(0), seqs, alive_lp, seqs, jnp.full((b, k), neg_inf), max_lengths <= 0,
             cache)
    _, _, _, fin_seqs, fin_scores, _, _ = _while(cond, body, state, phases, cache_at=6)
    return fin_seqs, fin_scores
