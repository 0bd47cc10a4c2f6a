"""The attention kernels, one module each, found by name (``model.attention``; the mechanism
is :class:`transformer_jax.plugins.Registry`'s).

"blockwise" is ``transformer_jax.model.kernels.blockwise``; a kernel kept elsewhere is one file
in a directory of ``TRANSFORMER_JAX_KERNELS``. "local", the restricted self-attention of the
paper's Table 1, is an alias: the local_global kernel with no global positions. "dense", the
paper's, is ``model.transformer.dot_product_attention``, which the model calls directly.
A kernel module defines:

* ``TRAITS``, a :class:`Traits`: what it computes and takes, which the call that runs a
  kernel by name (``attention.attend``), the config's validation, the resume rules and the
  benchmarks read instead of keeping lists of names;
* ``run(q, k, v, q_segment_ids, kv_segment_ids, *, causal, q_offset, window, global_tokens,
  block_size, random_features, dropout_rate, dropout_rng, dropout_impl, return_weights)``,
  returning (outputs [b, h, q, d_v], the weights [b, h, q, k] or None): head-major
  q [b, h, q, d_k], k [b, h_kv, k, d_k], v [b, h_kv, k, d_v], segment ids [b, q] and [b, k]
  (0: padding). It takes the keywords it uses and ignores the others (``**_``); ``attend``
  hands it only what its traits say it can do;
* optionally ``unavailable()``: why its own implementation cannot run on this machine (the
  stand-in that runs instead, if any, is the module's business), or None;
* with the ``recurrent`` trait, ``init_state(k, v, **options)`` and
  ``step(state, q, k, v, **options) -> (outputs, state)``: cached decoding from a state of
  fixed size instead of the keys and values of every earlier position;
* optionally ``reference(q, k, v, q_segment_ids, kv_segment_ids, *, causal, **options)``:
  what an approximate kernel computes, written out the slow way (the accelerator check
  compares the kernel with it on the device at hand).

The masks every kernel builds are in ``model/masks.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformer_jax import plugins

# The paper's kernel: the one that hands back weights and applies attention dropout, the
# reference the others are measured against.
DENSE = "dense"


@dataclasses.dataclass(frozen=True)
class Traits:
    """What a kernel computes and what it takes."""

    # The paper's softmax attention over every allowed key, as the dense kernel computes it
    # up to rounding: a run trained with one exact kernel may resume with another.
    exact: bool
    # It can hand back the attention weights; a call that wants them (the attention pictures)
    # runs the dense kernel instead, with this kernel's mask.
    returns_weights: bool
    # It applies dropout to the attention weights (model.attention_dropout_rate > 0).
    supports_dropout: bool
    # It keeps the sentences of a packed row apart by their segment ids (data.packing);
    # without, it tells only padding (segment 0) from the rest, and rows must not be packed.
    segment_ids: bool
    # It needs d_k == d_v.
    needs_equal_head_dims: bool = False
    # It sees only the keys within model.local_window (``run``'s ``window``) of each query.
    # Where there is no window (cross-attention: the keys are not positions of the queries)
    # the kernel ``without_window`` runs instead.
    window: bool = False
    without_window: str = DENSE
    # With the window, the first model.global_tokens positions of every sentence are global:
    # they see and are seen by every position (``run``'s ``global_tokens``).
    global_tokens: bool = False
    # Cached decoding keeps a state of fixed size (``init_state``, ``step``) instead of every
    # earlier key and value: a decoded token costs the same at any length.
    recurrent: bool = False


class Kernel(plugins.Entry):
    """A registered kernel: its name, traits and module (the module docstring's functions)."""

    def run(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """The module's ``run``."""
        return self.function("run")(*args, **kwargs)

    def unavailable(self) -> str | None:
        """Why the module's own implementation cannot run here, or None."""
        why = getattr(self.module, "unavailable", None)
        return why() if why else None


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_KERNELS", "model.attention", traits="TRAITS", first=DENSE,
    needs=(plugins.Need("TRAITS", Traits), plugins.Need("run"),
           plugins.Need("init_state", trait="recurrent"), plugins.Need("step", trait="recurrent")),
    # The restricted self-attention of the paper's Table 1 is local_global without global
    # positions.
    aliases={"local": plugins.Alias("local_global", options={"global_tokens": 0},
                                    traits={"global_tokens": False})},
    make=lambda entry: Kernel(entry.name, entry.module, entry.traits, entry.options))
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having
