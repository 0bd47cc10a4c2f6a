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

# Fields that choose the defaults of the others: an override of one alone would change the
# label and not the model (``variant=big`` training the base model as "big"). They are chosen
# in the config file's argument (``configs/base.py:big,dataset=builtin,scale=demo``), and
# ``data.defaults_for`` follows ``data.name``, whose override brings the dataset's settings.
SELECTORS: dict[str, str] = {
    "variant": "the variant is chosen in the config argument, e.g. "
               "--config=configs/base.py:big (a sweep: its variant axis)",
    "scale": "the scale is chosen in the config argument, e.g. "
             "--config=configs/base.py:base,scale=demo (a sweep: --scale=demo)",
    "data.defaults_for": "it follows data.name: give data.name alone, which brings that "
                         "dataset's settings (or dataset=NAME in the config argument)",
}


def refuse_selector(field: str, value: Any, origin: str) -> ConfigError:
    """The error for an override of one of SELECTORS."""
    named = f"{origin}.{field}" if origin.startswith("--") else f"{origin}: {field}"
    return ConfigError(f"{named}={value!r} would change the label, not the model it trains: "
                       f"{SELECTORS[field]}")


def apply_overrides(c: ml_collections.ConfigDict, overrides: Mapping[str, Any],
                    origin: str = "--config") -> ml_collections.ConfigDict:
    """Sets dotted fields (``{"optim.lr_scale": 2.0, "data.name": "wmt14_enfr"}``) and
    returns ``c``: the one way the command line and sweeps change a config.

    A new ``data.name`` first brings that dataset's settings for the config's variant (EN-FR:
    target language fr, vocabulary 32,000, big's P_drop 0.1), except in fields the config
    had already changed from the old dataset's; the overrides given win over both. An unknown
    field or a value of the wrong type raises ConfigError naming the field (values are
    checked against their ranges by :func:`validate`). A field of SELECTORS given another
    value than the config's is refused.
    """
    for field in SELECTORS.keys() & overrides.keys():
        if overrides[field] != get_field(c, field):
            raise refuse_selector(field, overrides[field], origin)
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
    for path in dataset_fields():
        # not changed by the config file or the user
        if get_field(c, path) == get_field(before, path):
            set_field(c, path, get_field(after, path), origin)
    c.data.name = c.data.defaults_for = dataset


def dataset_fields() -> list[str]:
    """The fields some dataset sets (its settings, a variant's own for it): those a change of
    ``data.name`` may change."""
    return sorted({path for table in [*(d.settings for d in DATASETS.values()),
                                      *(d for v in VARIANTS.values() for d in v.datasets.values())]
                   for path in table})
