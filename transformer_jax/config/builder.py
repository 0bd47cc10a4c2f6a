"""Building a config from the tables: a variant on a dataset at a scale, as a config file's
argument names them (``"A_h4,dataset=builtin,scale=demo"``)."""

from __future__ import annotations

from typing import Any

import ml_collections

from transformer_jax.config import datasets
from transformer_jax.config.defaults import base_config
from transformer_jax.config.fields import apply_all, get_field, set_field
from transformer_jax.config.scales import SCALES
from transformer_jax.config.variants import VARIANTS
from transformer_jax.errors import ConfigError


def build(variant: str = "base", dataset: str = datasets.DEFAULT,
          scale: str = "paper") -> ml_collections.ConfigDict:
    """The config of a named variant of ``VARIANTS`` on a named dataset at a named scale:
    the base config, the variant's overrides, the dataset's settings (and the variant's own
    for it), then the scale.

    Raises ConfigError naming the variant, dataset or scale if one is unknown, or a dataset
    or scale the variant has settings for that is unknown (a misspelt key would never apply).
    """
    for name, table, what in [(variant, VARIANTS, "variant"),
                              (dataset, datasets.DATASETS, "dataset"), (scale, SCALES, "scale")]:
        if name not in table:
            raise ConfigError(f"unknown {what} {name!r}; known: {', '.join(table)}")
    v = VARIANTS[variant]
    for field, keys, table in [("datasets", v.datasets, datasets.DATASETS),
                               ("scales", v.scales, SCALES)]:
        for key in keys:
            if key not in table:
                raise ConfigError(f"variant {variant}: its {field} names {key!r}, which is no "
                                  f"{field[:-1]}; known: {', '.join(table)}")
    c = base_config()
    c.variant = variant
    apply_all(c, VARIANTS[variant].overrides, f"variant {variant}")
    apply_all(c, dataset_settings(variant, dataset), f"dataset {dataset}")
    c.data.name = c.data.defaults_for = dataset
    apply_scale(c, scale)
    return c


def dataset_settings(variant: str, dataset: str) -> dict[str, Any]:
    """The fields a dataset sets for a variant: its own settings, then the variant's for it."""
    return {**datasets.DATASETS[dataset].settings, **VARIANTS[variant].datasets.get(dataset, {})}


def apply_scale(c: ml_collections.ConfigDict, scale: str) -> ml_collections.ConfigDict:
    """Brings a paper-size config to ``scale``, keeping the variant's ratios to the base model.

    Each field of the scale's ``base`` becomes the config's value times the scale's ratio to
    the base model (d_model 128/512 at demo scale: C_d1024 becomes 256, d_k and d_v scale with
    d_model, 300K steps become 1,350); the number of heads stays the variant's, so row A keeps
    h * d_k = d_model. Then the scale's data, batch and schedule settings, and last the
    variant's own settings at this scale (``Variant.scales``: big's steps and P_drop at demo).
    """
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    s, paper_base = SCALES[scale], base_config()
    ratios = {path: size / get_field(paper_base, path) for path, size in s.base.items()}
    if "model.d_model" in ratios:
        ratios.update(dict.fromkeys(("model.d_k", "model.d_v"), ratios["model.d_model"]))
    for path, ratio in ratios.items():
        value = get_field(c, path)
        if value:  # 0 stays 0 (d_k, d_v derived as d_model // num_heads)
            set_field(c, path, max(1, round(value * ratio)))
    apply_all(c, s.overrides, f"scale {scale}")
    apply_all(c, VARIANTS[c.variant].scales.get(scale, {}),
              f"variant {c.variant} at scale {scale}")
    c.scale = scale
    return c


def from_arg(arg: str | None, default_variant: str = "base",
             default_dataset: str = datasets.DEFAULT,
             default_scale: str = "paper") -> ml_collections.ConfigDict:
    """The config named by a config-file argument ``"VARIANT[,dataset=NAME][,scale=NAME]"``."""
    variant, options = parse_variant_arg(arg, default_variant)
    unknown = set(options) - {"dataset", "scale"}
    if unknown:
        raise ConfigError(f"unknown config option(s) {', '.join(sorted(unknown))} in {arg!r}; "
                          "the options are dataset=NAME and scale=NAME")
    return build(variant, options.get("dataset", default_dataset),
                 options.get("scale", default_scale))


def parse_variant_arg(arg: str | None, default: str = "base") -> tuple[str, dict[str, str]]:
    """Splits a config-file argument like ``"A_h4,dataset=builtin"``.

    Returns the variant name and a dict of the ``key=value`` options that follow it.
    """
    variant, options = default, {}
    for part in (arg or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "=" in part:
            key, value = part.split("=", 1)
            options[key.strip()] = value.strip()
        else:
            variant = part
    return variant, options
