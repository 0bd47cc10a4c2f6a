"""Decoding: the cache changes no logit, beam search finds what greedy misses, sampling stays
inside its allowed set. The searches are tested on hand-set tables as well as the model."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transformer_jax.data.tokenizer import EOS_ID, PAD_ID
from transformer_jax.decoding import decode, loops
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.model.transformer import Transformer, shift_right

TINY = TransformerConfig(vocab_size=50, num_layers=2, d_model=32, d_ff=64, num_heads=4, d_k=8,
                         d_v=8, dropout_rate=0.0, max_len=64, deterministic=True)
full_logits = jax.jit(lambda params, src, tgt: Transformer(TINY).apply({"params": params}, src,
                                                                      tgt))


def random_tokens(shape, seed, low=3):
    return jnp.asarray(np.random.default_rng(seed).integers(low, TINY.vocab_size, shape),
                       jnp.int32)


@pytest.fixture(scope="module")
def params():
    src = jnp.ones((1, 4), jnp.int32)
    p = jax.jit(Transformer(TINY).init)(jax.random.key(0), src, src)["params"]
    # Make EOS likely, so that hypotheses of random weights end at different lengths.
    return {**p, "logits_bias": p["logits_bias"].at[EOS_ID].set(2.5)}


def source_batch():
    """Two sources of different lengths: 7 tokens, and 4 then padding."""
    src = random_tokens((2, 7), 0)
    return src.at[1, 4:].set(PAD_ID)


# ----------------------------------------------------------------------------------------
# The key/value cache


def test_cached_decoding_gives_the_logits_of_full_recomputation(params):
    src, tgt = source_batch(), random_tokens((2, 9), 1)
    full = full_logits(params, src, tgt)  # [2, 9, V]
    inputs = shift_right(tgt)
    encoded, segments = decode.encode(params, TINY, src)
    cache = decode.init_cache(params, TINY, encoded, segments, max_len=12)
    step = jax.jit(lambda c, ids: decode.decode_step(params, TINY, c, encoded, segments, ids))
    for t in range(9):
        logits, cache = step(cache, inputs[:, t])
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5, rtol=0)


def test_uncached_step_recomputes_the_same_logits(params):
    """The benchmark's baseline: the whole prefix again at every step (buckets of 4)."""
    src, tgt = source_batch(), random_tokens((2, 9), 2)
    full = full_logits(params, src, tgt)
    encoded, segments = decode.encode(params, TINY, src)
    tokens_to_logits, state = decode.uncached_step(params, TINY, encoded, segments, 12,
                                                   bucket=4)
    run = jax.jit(tokens_to_logits)
    inputs = shift_right(tgt)
    for t in range(9):
        logits, state = run(inputs[:, t], state)
        np.testing.assert_allclose(logits[:, 1:], full[:, t, 1:], atol=1e-5, rtol=0)
        assert logits[0, PAD_ID] == -np.inf  # padding is never an output


# ----------------------------------------------------------------------------------------
# Hand-set models: the next-token distribution is a table of the last two tokens


A, B = 2, 3  # the two words of the table's vocabulary {PAD, EOS, A, B}
START = PAD_ID


def table_step(table):
    """tokens_to_logits of a second-order Markov chain: log P(next | previous two tokens).

    The previous token is read from the cache (a copy of the history), so a beam search
    that reorders the cache wrongly would look up the wrong rows.
    """
    log_table = jnp.log(jnp.asarray(table, jnp.float32))  # [V, V, V]

    def tokens_to_logits(ids, cache):
        history, step = cache["history"], cache["step"]  # [n, L], scalar
        history = jax.lax.dynamic_update_index_in_dim(history, ids, step, axis=1)
        previous = jnp.where(step > 0, jax.lax.dynamic_index_in_dim(
            history, jnp.maximum(step - 1, 0), axis=1, keepdims=False), START)
        return log_table[previous, ids], {"history": history, "step": step + 1}

    return tokens_to_logits


def table_cache(rows, max_len):
    return {"history": jnp.zeros((rows, max_len), jnp.int32), "step": jnp.zeros((), jnp.int32)}


def make_table(rules, default=(0.0, 0.34, 0.33, 0.33)):
    """[V, V, V] probabilities: rules[(previous, last)] = P(. | previous, last) over
    (PAD, EOS, A, B)."""
    table = np.tile(np.asarray(default, np.float64), (4, 4, 1))
    for (prev, last), probs in rules.items():
        table[prev, last] = probs
    return table


def sequence_log_prob(table, tokens):
    prev, last, total = START, START, 0.0
    for token in tokens:
        total += math.log(table[prev, last, token])
        prev, last = last, token
    return total


def best_by_enumeration(table, max_length, alpha):
    """The highest-scoring hypothesis of all: every word sequence, ended by EOS or cut at
    ``max_length``, scored log P / lp(length)."""
    best, best_score = None, -math.inf
    for n in range(max_length + 1):
        for words in itertools.product((A, B), repeat=n):
            hyp = list(words) + [EOS_ID] if n < max_length else list(words)
            if not hyp:
                continue
            score = (sequence_log_prob(table, hyp)
                     / loops.length_penalty(len(hyp), alpha))
            if score > best_score:
                best, best_score = hyp, score
    return best, best_score


def run_beam(table, beam_size, alpha, max_length, rows=1):
    seqs, scores = loops.beam_search(
        table_step(table), table_cache(rows * beam_size, 8), beam_size=beam_size, alpha=alpha,
        max_lengths=jnp.full((rows,), max_length, jnp.int32), max_len=8)
    return np.asarray(seqs), np.asarray(scores)


def run_greedy(table, max_length, rows=1):
    return np.asarray(loops.greedy_search(
        table_step(table), table_cache(rows, 8), jnp.full((rows,), max_length, jnp.int32), 8))


def tokens_of(row):
    """The hypothesis in an output row: up to and including EOS."""
    row = list(row)
    return row[: row.index(EOS_ID) + 1] if EOS_ID in row else [t for t in row if t]


# P(A | start) = 0.5 leads greedy to [A, EOS] (0.5 * 0.45 = 0.225); [B, EOS] has
# 0.4 * 0.9 = 0.36.
GARDEN_PATH = make_table({
    (START, START): (0.0, 0.1, 0.5, 0.4),
    (START, A): (0.0, 0.45, 0.3, 0.25),
    (START, B): (0.0, 0.9, 0.05, 0.05),
})


def test_length_penalty_formula():
    assert loops.length_penalty(1, 0.6) == pytest.approx(1.0)  # (5 + 1) / 6 = 1
    assert loops.length_penalty(7, 0.6) == pytest.approx(2 ** 0.6)  # 1.5157
    assert loops.length_penalty(25, 0.6) == pytest.approx(5 ** 0.6)  # 2.6265
    assert loops.length_penalty(25, 0.0) == 1.0
    assert loops.length_penalty(13, 1.0) == pytest.approx(3.0)


def test_beam_search_finds_the_best_hypothesis_greedy_misses():
    best, best_score = best_by_enumeration(GARDEN_PATH, 5, 0.6)
    assert best == [B, EOS_ID]
    assert best_score == pytest.approx(math.log(0.36) / (7 / 6) ** 0.6)
    greedy = tokens_of(run_greedy(GARDEN_PATH, 5)[0])
    assert greedy == [A, EOS_ID]
    seqs, scores = run_beam(GARDEN_PATH, beam_size=2, alpha=0.6, max_length=5)
    assert tokens_of(seqs[0, 0]) == best
    assert scores[0, 0] == pytest.approx(best_score, rel=1e-5)
    assert tokens_of(seqs[0, 1]) == greedy  # the runner-up, finished at the same step
    assert scores[0, 1] == pytest.approx(math.log(0.225) / (7 / 6) ** 0.6, rel=1e-5)


def test_beam_search_reorders_the_cache_with_its_beams():
    # Step 2's best two candidates, [A, A] and [A, B], both extend beam 0: beam 1 must take
    # over beam 0's cache. Step 3 then reads the previous token (A) from the cache; with
    # beam 1's stale cache it would read B and look up the wrong row.
    table = make_table({
        (START, START): (0.0, 0.1, 0.5, 0.4),
        (START, A): (0.0, 0.05, 0.5, 0.45),
        (START, B): (0.0, 0.4, 0.3, 0.3),
        (A, B): (0.0, 0.9, 0.05, 0.05),
    })
    best, best_score = best_by_enumeration(table, 5, 0.6)
    assert best == [A, B, EOS_ID]  # P = 0.5 * 0.45 * 0.9
    assert tokens_of(run_greedy(table, 5)[0]) == [A, A, EOS_ID]
    seqs, scores = run_beam(table, beam_size=2, alpha=0.6, max_length=5)
    assert tokens_of(seqs[0, 0]) == best
    assert scores[0, 0] == pytest.approx(best_score, rel=1e-5)


def test_length_penalty_decides_between_short_and_long():
    # [EOS] has P = 0.5; [A, EOS] has P = 0.45 * 0.95 = 0.4275 but is longer.
    table = make_table({(START, START): (0.0, 0.5, 0.45, 0.05),
                        (START, A): (0.0, 0.95, 0.025, 0.025)})
    for alpha, expected in [(0.0, [EOS_ID]), (0.6, [EOS_ID]), (2.0, [A, EOS_ID])]:
        assert best_by_enumeration(table, 5, alpha)[0] == expected
        seqs, _ = run_beam(table, beam_size=2, alpha=alpha, max_length=5)
        assert tokens_of(seqs[0, 0]) == expected, alpha


def test_beam_stops_when_every_beam_has_finished():
    # [B, EOS] and [A, EOS] are the two best candidates of step 2: both beams have
    # finished, so no third step runs although 8 were allowed.
    steps = []

    def counting(ids, cache):
        jax.debug.callback(lambda: steps.append(1))
        return table_step(GARDEN_PATH)(ids, cache)

    seqs, scores = loops.beam_search(counting, table_cache(2, 8), beam_size=2, alpha=0.6,
                                      max_lengths=jnp.array([8], jnp.int32), max_len=8)
    jax.effects_barrier()
    assert len(steps) == 2
    assert np.all(np.asarray(seqs)[0, :, 2:] == PAD_ID) and np.all(np.isfinite(scores))


def test_beam_respects_each_sentences_maximum_length():
    # A table that never ends: every hypothesis is cut at its sentence's own maximum.
    never = make_table({}, default=(0.0, 1e-9, 0.6, 0.4 - 1e-9))
    seqs, scores = run_beam(never, beam_size=3, alpha=0.6, max_length=5, rows=1)
    assert tokens_of(seqs[0, 0]) == [A] * 5
    rows = loops.beam_search(
        table_step(never), table_cache(6, 8), beam_size=3, alpha=0.6,
        max_lengths=jnp.array([3, 6], jnp.int32), max_len=8)[0]
    assert tokens_of(np.asarray(rows)[0, 0]) == [A] * 3
    assert tokens_of(np.asarray(rows)[1, 0]) == [A] * 6


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_1_is_greedy_search_on_random_tables(seed):
    rng = np.random.default_rng(seed)
    table = rng.dirichlet([1.0, 1.0, 1.0], size=(4, 4))  # over (EOS, A, B)
    table = np.concatenate([np.zeros((4, 4, 1)), table], axis=-1)
    greedy = run_greedy(table, 7)
    seqs, _ = run_beam(table, beam_size=1, alpha=0.6, max_length=7)
    np.testing.assert_array_equal(seqs[:, 0], greedy)


def test_beam_size_1_is_greedy_search_on_the_model(params):
    src = source_batch()
    max_lengths = jnp.array([9, 6], jnp.int32)
    outputs = {}
    for strategy in ("greedy", "beam"):
        decoding = decode.DecodeConfig(strategy=strategy, beam_size=1, alpha=0.6)
        outputs[strategy] = np.asarray(decode.generate(
            params, src, max_lengths, jax.random.key(0), config=TINY, decoding=decoding,
            max_len=16))
    np.testing.assert_array_equal(outputs["beam"], outputs["greedy"])
    assert outputs["greedy"][1, 6:].tolist() == [PAD_ID] * 10  # cut at 6 tokens


@pytest.mark.slow
def test_beam_scores_are_the_models_scores_of_its_hypotheses(params):
    """The score of each returned hypothesis equals log P(hypothesis) / lp(length) under a
    full recomputation of the model: the cache was reordered with its beams."""
    src, k, alpha = source_batch(), 3, 0.6
    encoded, segments = decode.encode(params, TINY, src)
    encoded, segments = jnp.repeat(encoded, k, 0), jnp.repeat(segments, k, 0)
    step, cache = decode.cached_step(params, TINY, encoded, segments, 12)
    seqs, scores = jax.jit(lambda c: loops.beam_search(
        step, c, beam_size=k, alpha=alpha, max_lengths=jnp.array([12, 7], jnp.int32),
        max_len=12))(cache)
    seqs, scores = np.asarray(seqs).reshape(2 * k, 12), np.asarray(scores).reshape(2 * k)
    # Teacher-forced log-probabilities of all 2k hypotheses at once (padding after each
    # changes no earlier logit).
    logits = full_logits(params, jnp.repeat(src, k, 0), jnp.asarray(seqs))
    log_probs = np.asarray(jax.nn.log_softmax(logits.at[..., PAD_ID].set(-jnp.inf)))
    lengths = set()
    for i in range(2 * k):
        hyp = tokens_of(seqs[i])
        lengths.add(len(hyp))
        total = sum(log_probs[i, t, token] for t, token in enumerate(hyp))
        expected = total / loops.length_penalty(len(hyp), alpha)
        assert scores[i] == pytest.approx(expected, abs=1e-4), (i, hyp)
    for row in range(2):
        assert list(scores[row * k:(row + 1) * k]) == sorted(scores[row * k:(row + 1) * k],
                                                             reverse=True)
    assert len(lengths) > 1  # hypotheses of different lengths were compared


@pytest.mark.slow
def test_beams_share_their_sentences_cross_attention_keys_and_values(params):
    """Beam search with one copy of the cross-attention keys and values per sentence finds
    what it found with a copy per beam, reordered with the beams at every step (the former
    path: the encoder output repeated per beam), with the same scores."""
    src, k, max_len = source_batch(), 4, 12
    max_lengths = jnp.array([12, 7], jnp.int32)
    encoded, segments = decode.encode(params, TINY, src)
    search = functools.partial(loops.beam_search, beam_size=k, alpha=0.6,
                               max_lengths=max_lengths, max_len=max_len)

    shared_step, shared = decode.cached_step(params, TINY, encoded, segments, max_len, beams=k)
    layer = shared["decoder"]["layer_0"]
    assert layer["cross_attention"]["cross_key"].shape == (2, 4, 7, 8)  # [b, h, s, d_k]
    assert layer["cross_attention"]["cross_value"].shape == (2, 4, 7, 8)
    assert layer["self_attention"]["cached_key"].shape == (2 * k, 4, max_len, 8)
    per_beam_step, per_beam = decode.cached_step(params, TINY, jnp.repeat(encoded, k, 0),
                                                 jnp.repeat(segments, k, 0), max_len)
    assert per_beam["decoder"]["layer_0"]["cross_attention"]["cross_key"].shape[0] == 2 * k

    seqs, scores = jax.jit(lambda c: search(shared_step, c))(shared)
    old_seqs, old_scores = jax.jit(lambda c: search(per_beam_step, c))(per_beam)
    np.testing.assert_array_equal(seqs, old_seqs)
    np.testing.assert_allclose(scores, old_scores, rtol=1e-5)
    assert len({len(tokens_of(s)) for s in np.asarray(seqs).reshape(2 * k, -1)}) > 1
    # generate takes the shared path, cached or not.
    for use_cache in (True, False):
        out = decode.generate(params, src, max_lengths, jax.random.key(0), config=TINY,
                              decoding=decode.DecodeConfig(beam_size=k, alpha=0.6),
                              max_len=max_len, use_cache=use_cache)
        np.testing.assert_array_equal(out, seqs[:, 0])


def test_cache_lengths_double_from_the_first_phase_up_to_the_buffer():
    assert decode.cache_lengths(64) == (16, 32, 64)
    assert decode.cache_lengths(80, 16) == (16, 32, 64, 80)
    assert decode.cache_lengths(16, 16) == (16,)
    assert decode.cache_lengths(12, 16) == (12,)
    assert decode.cache_lengths(64, 0) == (64,)


@pytest.mark.slow
def test_beam_search_in_phases_of_growing_cache_finds_the_same(params):
    """A cache that starts 4 positions long and grows (4, 8, 16, 29) gives beam search the
    hypotheses and scores of a cache of all 29 positions; hypotheses end in different
    phases, and sentence 1 stops mid-phase."""
    src, k, max_len = source_batch(), 3, 29
    encoded, segments = decode.encode(params, TINY, src)
    phases = loops.Phases(decode.cache_lengths(max_len, 4), decode.grow_cache)
    assert phases.lengths == (4, 8, 16, 29)
    results = []
    for lengths in (phases, None):
        step, cache = decode.cached_step(params, TINY, encoded, segments,
                                         lengths.lengths[0] if lengths else max_len, beams=k)
        results.append(jax.jit(lambda c, step=step, lengths=lengths: loops.beam_search(
            step, c, beam_size=k, alpha=0.6, max_lengths=jnp.array([29, 11], jnp.int32),
            max_len=max_len, phases=lengths))(cache))
    (seqs, scores), (full_seqs, full_scores) = results
    np.testing.assert_array_equal(seqs, full_seqs)
    np.testing.assert_allclose(scores, full_scores, rtol=1e-5)
    ended = {len(tokens_of(s)) for s in np.asarray(seqs).reshape(2 * k, -1)}
    assert len(ended) > 1 and max(ended) > 4  # finished in different phases

    grown = decode.grow_cache(cache, 40)["decoder"]["layer_1"]["self_attention"]
    assert grown["cached_key"].shape[2] == grown["cached_value"].shape[2] == 40
    assert grown["cache_index"].shape == ()


def test_greedy_generate_in_phases_of_growing_cache_changes_no_output(params):
    """Forced to full length (no EOS), the output crosses every phase (4, 8, 16, 32, 40)."""
    src, max_lengths = source_batch(), jnp.array([40, 23], jnp.int32)
    outputs = [np.asarray(decode.generate(
        params, src, max_lengths, jax.random.key(3), config=TINY,
        decoding=decode.DecodeConfig(strategy="greedy"), max_len=40, eos_id=-1,
        cache_phase=phase)) for phase in (4, 0)]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert (outputs[0][0] > 0).all() and (outputs[0][1, :23] > 0).all()


# ----------------------------------------------------------------------------------------
# Sampling


LOGITS = np.log(np.array([1e-30, 0.05, 0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.03, 0.02]))


def sample_once(rows, **kwargs):
    """One sampled token for each of ``rows`` rows from the fixed distribution LOGITS."""
    table = jnp.asarray(LOGITS, jnp.float32)

    def tokens_to_logits(ids, cache):
        return jnp.broadcast_to(table, (ids.shape[0], table.shape[0])), cache

    out = loops.sample_search(tokens_to_logits, {}, jax.random.key(kwargs.pop("seed", 0)),
                               jnp.ones((rows,), jnp.int32), 1, **kwargs)
    return np.asarray(out)[:, 0]


def test_top_k_never_samples_outside_the_k_most_probable():
    tokens = sample_once(4000, top_k=3)
    assert set(tokens) == {2, 3, 4}  # P = 0.3, 0.2, 0.15
    freq = np.bincount(tokens, minlength=10)[[2, 3, 4]] / len(tokens)
    np.testing.assert_allclose(freq, np.array([0.3, 0.2, 0.15]) / 0.65, atol=0.03)


@pytest.mark.parametrize("top_p,allowed", [(0.5, {2, 3}), (0.6, {2, 3, 4}),
                                           (0.3, {2}), (0.1, {2})])
def test_top_p_never_samples_outside_the_nucleus(top_p, allowed):
    # The nucleus: the most probable tokens until their mass reaches top_p
    # (0.3 + 0.2 = 0.5 >= 0.5; 0.3 + 0.2 + 0.15 = 0.65 >= 0.6).
    tokens = sample_once(3000, top_p=top_p, seed=1)
    assert set(tokens) == allowed


def test_top_k_and_top_p_together_take_the_smaller_set():
    assert set(sample_once(2000, top_k=2, top_p=0.9, seed=2)) == {2, 3}


def test_filter_logits_values():
    logits = jnp.asarray([[1.0, 3.0, 2.0, 0.0]])
    np.testing.assert_array_equal(loops.filter_logits(logits, 2.0), [[0.5, 1.5, 1.0, 0.0]])
    kept = np.isfinite(np.asarray(loops.filter_logits(logits, top_k=2)))
    assert kept.tolist() == [[False, True, True, False]]


def test_temperature_to_zero_is_greedy(params):
    src = source_batch()
    max_lengths = jnp.array([10, 10], jnp.int32)

    def run(**settings):
        decoding = decode.DecodeConfig(**settings)
        return np.asarray(decode.generate(params, src, max_lengths, jax.random.key(3),
                                          config=TINY, decoding=decoding, max_len=16))

    # (That sampling spreads at temperature 1 is the top-k test's business.)
    np.testing.assert_array_equal(run(strategy="sample", temperature=1e-6),
                                  run(strategy="greedy"))
