"""The attention kernels, one module each, found by name.

``model.attention`` names a module of this package: "blockwise" is
``transformer_jax.model.kernels.blockwise``. The directories listed in the environment
variable ``TRANSFORMER_JAX_KERNELS`` (separated by ``os.pathsep``) are searched too, so that a
kernel written elsewhere is one file there. A kernel module defines:

* ``TRAITS``, a :class:`Traits`: what it computes and takes, which the model's one call
  (``attention.attend``), the config's validation, the resume rules and the benchmarks read
  instead of keeping lists of names;
* ``run(q, k, v, q_segment_ids, kv_segment_ids, *, causal, q_offset, window, block_size,
  dropout_rate, dropout_rng, dropout_impl, return_weights)``, returning (outputs
  [b, h, q, d_v], the weights [b, h, q, k] or None): head-major q [b, h, q, d_k],
  k [b, h_kv, k, d_k], v [b, h_kv, k, d_v], segment ids [b, q] and [b, k] (0: padding). It
  takes the keywords it uses and ignores the others (``**_``); ``attend`` hands it only what
  its traits say it can do;
* optionally ``unavailable()``: why its own implementation cannot run on this machine (the
  stand-in that runs instead, if any, is the module's business), or None;
* with the ``recurrent`` trait, ``init_state(k, v, **options)`` and
  ``step(state, q, k, v, **options) -> (outputs, state)``: cached decoding from a state of
  fixed size instead of the keys and values of every earlier position;
* optionally ``reference(q, k, v, q_segment_ids, kv_segment_ids, *, causal, **options)``:
  what an approximate kernel computes, written out the slow way (the accelerator check
  compares the kernel with it on the device at hand).

Modules whose names start with "_" are not kernels. The masks every kernel builds are in
``model/masks.py``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from transformer_jax import plugins
from transformer_jax.errors import ConfigError

# The paper's kernel: the one that hands back weights and applies attention dropout, the
# reference the others are measured against.
DENSE = "dense"
# The config field that names a kernel, and the variable naming more directories of kernels.
FIELD = "model.attention"
PATH_VARIABLE = "TRANSFORMER_JAX_KERNELS"

__path__ += plugins.directories(PATH_VARIABLE)


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


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A registered kernel: its name, its traits and its functions (module docstring)."""

    name: str
    traits: Traits
    run: Callable[..., tuple[Any, Any]]
    unavailable: Callable[[], str | None]
    module: Any = None


def names() -> tuple[str, ...]:
    """Every kernel's name: the dense kernel first, then the others alphabetically."""
    found = plugins.module_names(tuple(__path__), PATH_VARIABLE)
    return (DENSE, *(name for name in found if name != DENSE))


def get(name: str) -> Kernel:
    """The kernel ``name``; ConfigError naming the field and the known kernels if unknown."""
    known = names()
    if name not in known:
        raise ConfigError(f"{FIELD}={name!r} is not one of {', '.join(known)}")
    module = importlib.import_module(f"{__name__}.{name}")
    traits, run = getattr(module, "TRAITS", None), getattr(module, "run", None)
    if not isinstance(traits, Traits) or not callable(run):
        raise ConfigError(f"{FIELD}={name!r}: {module.__file__} must define TRAITS (a "
                          f"{__name__}.Traits) and a function run")
    if traits.recurrent and not all(callable(getattr(module, f, None))
                                    for f in ("init_state", "step")):
        raise ConfigError(f"{FIELD}={name!r}: {module.__file__} is recurrent and must define "
                          "init_state and step")
    return Kernel(name, traits, run, getattr(module, "unavailable", _available), module)


def having(trait: str) -> tuple[str, ...]:
    """The names of the kernels whose trait ``trait`` is true, in the order of :func:`names`."""
    return tuple(name for name in names() if getattr(get(name).traits, trait))


def _available() -> str | None:
    return None
