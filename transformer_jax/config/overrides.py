"""Overrides by dotted name: the one way the command line and sweeps change a config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from transformer_jax.config import datasets
from transformer_jax.config.builder import build
from transformer_jax.config.datasets import DATASETS
from transformer_jax.config.fields import apply_all, get_field, set_field
from transformer_jax.config.variants import VARIANTS
from transformer_jax.errors import ConfigError


def apply_overrides(c: ml_collections.ConfigDict, overrides: Mapping[str, Any],
                    origin: str = "--config") -> ml_collections.ConfigDict:
    """Sets dotted fields (``{"optim.lr_scale": 2.0, "data.name": "wmt14_enfr"}``) and
    returns ``c``: the one way the command line and sweeps change a config.

    A new ``data.name`` first brings that dataset's settings for the config's variant (EN-FR:
    target language fr, vocabulary 32,000, big's P_drop 0.1), except in fields the config
    had already changed from the old dataset's; the overrides given win over both. An unknown
    field or a value of the wrong type raises ConfigError naming the field (values are
    checked against their ranges by :func:`validate`).
    """
    dataset = overrides.get("data.name")
    if dataset is not None and dataset != c.data.get("defaults_for", dataset):
        _switch_dataset(c, dataset, origin)
    apply_all(c, overrides, origin)
    return c


def _switch_dataset(c: ml_collections.ConfigDict, dataset: str, origin: str) -> None:
    try:
        datasets.get(dataset)
    except ConfigError as e:
        raise ConfigError(f"{origin}: {e}") from None
    if c.get("variant") not in VARIANTS:
        raise ConfigError(f"{origin}: data.name={dataset}: the settings of {dataset} are "
                          f"known for the variants of configs/table3.py, not "
                          f"{c.get('variant')!r}; start from a config file for {dataset} "
                          "(configs/wmt14_enfr.py, configs/wmt14_ende.py, configs/text.py)")
    scale = c.get("scale", "paper")
    before = build(c.variant, c.data.defaults_for, scale)
    after = build(c.variant, dataset, scale)
    fields = {path for table in [*(d.settings for d in DATASETS.values()),
                                 *(d for v in VARIANTS.values() for d in v.datasets.values())]
              for path in table}
    for path in sorted(fields):
        # not changed by the config file or the user
        if get_field(c, path) == get_field(before, path):
            set_field(c, path, get_field(after, path), origin)
    c.data.name = c.data.defaults_for = dataset
