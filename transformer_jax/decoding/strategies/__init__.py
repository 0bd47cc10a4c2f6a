"""The decoding strategies, one module each, found by name (``decode.strategy``; the
mechanism is :class:`transformer_jax.plugins.Registry`'s).

"beam" is ``transformer_jax.decoding.strategies.beam``; a strategy kept elsewhere is one file
in a directory of ``TRANSFORMER_JAX_STRATEGIES``. A strategy module defines:

* ``TRAITS``, a :class:`Traits`: what the decoder prepares for it;
* ``search(step, cache, key, max_lengths, max_len, decoding, eos_id, phases)``: the output
  ids [b, max_len] (tokens, EOS, then padding) of the step function ``step`` (rows of
  ``decoding.beam_size`` hypotheses a sentence with the ``beams`` trait, one otherwise; see
  ``decoding/loops.py``), with the settings of ``decoding`` (a ``decode.DecodeConfig``);
* ``describe(decoding)``: its settings in a few words ("beam 4, alpha 0.6"), ``decoding``
  the decode section as a mapping.

The config's validation reads :func:`names` for ``decode.strategy``'s choices; this module
imports nothing but the registry, so the config reaches no strategy through it.
"""

from __future__ import annotations

import dataclasses

from transformer_jax import plugins


@dataclasses.dataclass(frozen=True)
class Traits:
    """What the decoder prepares for a strategy."""

    # Decodes decode.beam_size hypotheses a sentence: the step function has that many rows
    # of each, and a result file names the beam size ("beam4").
    beams: bool


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_STRATEGIES", "decode.strategy", traits="TRAITS", first="greedy",
    needs=(plugins.Need("TRAITS", Traits),
           plugins.Need("search", shown="search(step, cache, key, max_lengths, max_len, "
                                        "decoding, eos_id, phases)"),
           plugins.Need("describe", shown="describe(decoding)")))
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having
