"""Greedy search: the most likely token at each step (``search.greedy_search``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from transformer_jax.decoding.loops import Phases, StepFn, greedy_search
from transformer_jax.decoding.strategies import Traits

TRAITS = Traits(beams=False)


def search(step: StepFn, cache: Any, key: jax.Array, max_lengths: jax.Array, max_len: int,
           decoding: Any, eos_id: int, phases: Phases | None) -> jax.Array:
    """[b, max_len] ids, the likeliest token at each step."""
    del key, decoding  # nothing random, nothing to set
    return greedy_search(step, cache, max_lengths, max_len, eos_id, phases)


def describe(decoding: Mapping[str, Any]) -> str:
    del decoding
    return "greedy"
