"""The kinds of dataset source, one module each, found by the name a dataset gives as its
``source`` (``config/datasets/``; the mechanism is :class:`transformer_jax.plugins.Registry`'s).

"tfds" is ``transformer_jax.data.source_kinds.tfds``; a kind kept elsewhere is one file in a
directory of ``TRANSFORMER_JAX_SOURCE_KINDS``. A kind's module defines ``TRAITS``, a
:class:`Traits`, and ``read(dataset, spec, split)``: the ``split`` of ``dataset`` (a
``config.datasets.Dataset``), read as ``spec`` (a ``sources.SourceSpec``) says, a
random-access sequence of (source, target) pairs (``sources.Source``). ``data/sources.py``
holds what the kinds share and :func:`~transformer_jax.data.sources.get_source`, which calls
the dataset's kind.
"""

from __future__ import annotations

import dataclasses

from transformer_jax import plugins


@dataclasses.dataclass(frozen=True)
class Traits:
    """What a kind of source asks of the user."""

    # Its datasets are read from a copy prepared beforehand, by the prepare command
    # (``python -m transformer_jax.prepare NAME``); the others need no preparing.
    prepared: bool


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_SOURCE_KINDS", "source", first="tfds", traits="TRAITS",
    needs=(plugins.Need("TRAITS", Traits),
           plugins.Need("read", shown="read(dataset, spec, split)")),
    make=lambda entry: entry.module)
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having
