"""Sampling (not in the paper): each token drawn from the model's distribution, sharpened by
``decode.temperature`` and cut by ``decode.top_k`` and ``decode.top_p``
(``search.sample_search``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from transformer_jax.decoding.loops import Phases, StepFn, sample_search
from transformer_jax.decoding.strategies import Traits

TRAITS = Traits(beams=False)


def search(step: StepFn, cache: Any, key: jax.Array, max_lengths: jax.Array, max_len: int,
           decoding: Any, eos_id: int, phases: Phases | None) -> jax.Array:
    """[b, max_len] ids drawn with ``key``."""
    return sample_search(step, cache, key, max_lengths, max_len,
                         temperature=decoding.temperature, top_k=decoding.top_k,
                         top_p=decoding.top_p, eos_id=eos_id, phases=phases)


def describe(decoding: Mapping[str, Any]) -> str:
    d = decoding
    return f"sampling, temperature {d['temperature']}, top-k {d['top_k']}, top-p {d['top_p']}"
