"""The paper's beam search (section 6.1): ``decode.beam_size`` hypotheses a sentence, length
penalty ``decode.alpha`` (``search.beam_search``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from transformer_jax.decoding.loops import Phases, StepFn, beam_search
from transformer_jax.decoding.strategies import Traits

TRAITS = Traits(beams=True)


def search(step: StepFn, cache: Any, key: jax.Array, max_lengths: jax.Array, max_len: int,
           decoding: Any, eos_id: int, phases: Phases | None) -> jax.Array:
    """[b, max_len] ids, the best-scoring hypothesis of each sentence."""
    del key  # nothing random
    seqs, _ = beam_search(step, cache, beam_size=decoding.beam_size, alpha=decoding.alpha,
                          max_lengths=max_lengths, max_len=max_len, eos_id=eos_id,
                          phases=phases)
    return seqs[:, 0]


def describe(decoding: Mapping[str, Any]) -> str:
    return f"beam {decoding['beam_size']}, alpha {decoding['alpha']}"
