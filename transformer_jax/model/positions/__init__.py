"""The position schemes, one module each, found by name (``model.positions``), like the
attention kernels.

``model.positions`` names a module of this package: "rotary" is
``transformer_jax.model.positions.rotary``. The directories listed in the environment
variable ``TRANSFORMER_JAX_POSITIONS`` are searched too. A scheme module defines:

* ``TRAITS``, a :class:`Traits`: how the scheme enters the model, which the model, the
  config's validation, the exports and the pictures read instead of lists of names;
* with the ``added`` trait, ``embedding(module, positions, config)``: the [b, n, d_model]
  vectors added to the token embeddings at integer ``positions`` [b, n], called inside the
  embedding module (``module.param`` makes a learned table), and ``table(config, params)``:
  the [max_len, d_model] table an export writes (``params``: the embedding's parameters);
* with the ``rotates`` trait, ``rotate(x, positions, scale)``: head-major queries or keys
  [b, h, n, d_k] turned by their positions [n] (times ``scale``), in every self-attention
  layer, keys before they enter the decoding cache.

``config.position_scale`` (set from ``decode.position_scale`` when translating) multiplies the
positions of a scheme with the ``interpolates`` trait: position interpolation, to run a
model on longer inputs than it was trained on. Modules whose names start with "_" are not
schemes.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from transformer_jax import plugins
from transformer_jax.errors import ConfigError

# The paper's scheme.
SINUSOIDAL = "sinusoidal"
FIELD = "model.positions"
PATH_VARIABLE = "TRANSFORMER_JAX_POSITIONS"

__path__ += plugins.directories(PATH_VARIABLE)


@dataclasses.dataclass(frozen=True)
class Traits:
    """How a position scheme enters the model."""

    # A vector per position added to the token embeddings (``embedding``; ``table`` for the
    # exports, whose targets take a position table).
    added: bool
    # That table is a parameter ("position_embedding" of each embedding), trained.
    learned: bool
    # Self-attention's queries and keys are rotated by their positions (``rotate``).
    rotates: bool
    # Positions may be fractional: decode.position_scale may scale them (interpolation).
    interpolates: bool
    # Rotations turn pairs of dimensions: d_k must be even.
    even_head_dims: bool = False


@dataclasses.dataclass(frozen=True)
class Scheme:
    """A registered scheme: its name, traits and module (the module docstring's functions)."""

    name: str
    traits: Traits
    module: Any


def names() -> tuple[str, ...]:
    """Every scheme's name: the paper's first, then the others alphabetically."""
    found = plugins.module_names(tuple(__path__), PATH_VARIABLE)
    return (SINUSOIDAL, *(name for name in found if name != SINUSOIDAL))


def get(name: str) -> Scheme:
    """The scheme ``name``; ConfigError naming the field and the known schemes if unknown."""
    known = names()
    if name not in known:
        raise ConfigError(f"{FIELD}={name!r} is not one of {', '.join(known)}")
    module = importlib.import_module(f"{__name__}.{name}")
    traits = getattr(module, "TRAITS", None)
    needs = (("embedding", "table") if getattr(traits, "added", False) else ()) + (
        ("rotate",) if getattr(traits, "rotates", False) else ())
    if not isinstance(traits, Traits) or not all(callable(getattr(module, f, None))
                                                 for f in needs):
        raise ConfigError(f"{FIELD}={name!r}: {module.__file__} must define TRAITS (a "
                          f"{__name__}.Traits) and {', '.join(needs) or 'its functions'}")
    return Scheme(name, traits, module)


def having(trait: str) -> tuple[str, ...]:
    """The names of the schemes whose trait ``trait`` is true, in the order of :func:`names`."""
    return tuple(name for name in names() if getattr(get(name).traits, trait))
