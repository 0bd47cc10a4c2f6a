"""A point's config and the arguments of its training command.

The command is the ordinary ``python -m transformer_jax.main --config=CONFIG:VARIANT
--workdir=ROOT/NAME --config.FIELD=VALUE ...``, the overrides being every field where the
point's config differs from the config file's own; a launcher
(:mod:`transformer_jax.sweeps.launchers`) wraps these arguments in its own command.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import ConfigError, UserError
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Point, Sweep, config_module, in_file
from transformer_jax.sweeps.vocab import VOCAB_FIELDS


def config_arg(point: Point, scale: str) -> str:
    """The config file's argument for a point: ``VARIANT`` at the paper's scale,
    ``VARIANT,dataset=builtin,scale=demo`` at the demo scale (the dataset of the scale,
    config.SCALES)."""
    if scale == "paper":
        return point.variant
    dataset = config_lib.SCALES[scale].dataset
    return point.variant + (f",dataset={dataset}" if dataset else "") + f",scale={scale}"


def point_config(sweep: Sweep, point: Point, scale: str = "paper",
                 overrides: dict[str, Any] | None = None
                 ) -> tuple[ml_collections.ConfigDict, ml_collections.ConfigDict]:
    """(the point's config, the config file's own config for the point's variant).

    In order: the config file's variant at the scale, end-of-run BLEU settings, the sweep's
    overrides, the point's grid values (``seed`` setting every field of
    config.SEED_FIELDS), then ``overrides`` (from the command line), each applied by
    config.apply_overrides. Raises ConfigError naming the point.
    """
    try:
        with in_file(Path(sweep.config), "config", name_own_errors=False):
            own = config_module(sweep.config).get_config(config_arg(point, scale))
        if not isinstance(own, ml_collections.ConfigDict) or "model" not in own:
            raise ConfigError(f"{sweep.config}: get_config returned {type(own).__name__}, not "
                              "the ConfigDict of an experiment")
        c = ml_collections.ConfigDict(own.to_dict())
        values = {k: v for k, v in point.fields.items()
                  if k not in (hyper.VARIANT, hyper.SEED, hyper.NAME)}
        if hyper.SEED in point.fields:
            values.update(dict.fromkeys(config_lib.SEED_FIELDS, point.fields[hyper.SEED]))
        layers = [config_lib.SCALES[scale].sweep, sweep.overrides,
                  sweep.demo_overrides if scale == "demo" else {}, values, overrides or {}]
        for layer in layers:
            config_lib.apply_overrides(c, layer, f"point {point.name}")
        if not any("train.bleu_every" in layer for layer in layers):
            # Validation BLEU once, at the last step (known only now, after the overrides).
            c.train.bleu_every = c.train.num_steps if c.train.bleu_sentences else 0
        c.train.visualize_sentences = ()  # sweeps draw no pictures
        config_lib.validate(c)
        from transformer_jax.training import schedules  # its schedules import JAX

        schedules.check(c)
    except UserError as e:
        message = str(e) if str(e).startswith("point ") else f"point {point.name}: {e}"
        raise ConfigError(message) from e
    return c, own


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        value = tuple(value)
    return repr(value) if isinstance(value, float | tuple) else str(value)


def config_overrides(config: ml_collections.ConfigDict,
                     own: ml_collections.ConfigDict) -> list[str]:
    """``--config.FIELD=VALUE`` for every field where ``config`` differs from ``own``: the
    training command gives ``config`` (the fields of config.SELECTORS are the config
    argument's). Where ``data.name`` differs, every field a dataset sets is given, so that
    the dataset's switch (config.apply_overrides) changes none of the point's values."""
    mine, theirs = _flatten(config.to_dict()), _flatten(own.to_dict())
    switched = mine.get("data.name") != theirs.get("data.name")
    kept = set(config_lib.dataset_fields()) if switched else set()
    return [f"--config.{k}={_format(v)}" for k, v in mine.items()
            if k not in config_lib.SELECTORS
            and (k in kept or k not in theirs or _format(theirs[k]) != _format(v))]


def train_args(sweep: Sweep, point: Point, scale: str, config: ml_collections.ConfigDict,
               own: ml_collections.ConfigDict, root: str) -> tuple[str, str, list[str]]:
    """(config argument, workdir, overrides) of the point's training command."""
    return (f"{sweep.config}:{config_arg(point, scale)}", os.path.join(root, point.name),
            config_overrides(config, own))


@dataclasses.dataclass(frozen=True)
class PointSpec:
    """A point as the sweep starts it, read once from the config :func:`point_config` made:
    its training command's arguments (:func:`train_args`) and what starting it reads of the
    config -- its steps (where it stands), the settings a resumed run cannot change (the
    check of its workdir's model), its seeds and the config itself as JSON (its records), the
    data fields that decide its vocabulary (one shared by the points), and whether the CPU's
    peak is to be measured."""

    args: tuple[str, str, tuple[str, ...]]  # (config argument, workdir, overrides)
    num_steps: int
    fixed: str  # JSON: resume.fixed_settings, compared with a workdir's config.json
    seeds: tuple[tuple[str, Any], ...]  # config.SEED_FIELDS and their values
    vocabulary: tuple[tuple[str, Any], ...]  # vocab.VOCAB_FIELDS of the data section
    peak_flops: float  # train.peak_flops
    dtype: str  # model.dtype
    record: str  # the config as JSON, as sweep.json records it

    @property
    def command_args(self) -> tuple[str, str, list[str]]:
        """The arguments as a launcher's ``command`` takes them."""
        config, workdir, overrides = self.args
        return config, workdir, list(overrides)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict, own: ml_collections.ConfigDict,
                    sweep: Sweep, point: Point, scale: str, root: str) -> PointSpec:
        """The spec of the point's config and the config file's own (``point_config``'s
        pair), its workdir in ``root``."""
        argument, workdir, overrides = train_args(sweep, point, scale, config, own, root)
        return cls((argument, workdir, tuple(overrides)), config.train.num_steps,
                   json.dumps(resume.fixed_settings(config), default=str),
                   tuple((f, config_lib.get_field(config, f)) for f in config_lib.SEED_FIELDS),
                   tuple((k, config.data[k]) for k in VOCAB_FIELDS),
                   config.train.peak_flops, config.model.dtype,
                   json.dumps(config.to_dict(), default=str))


def point_spec(sweep: Sweep, point: Point, scale: str, root: str,
               overrides: dict[str, Any] | None = None) -> PointSpec:
    """The spec of the point's config (:func:`point_config`'s, ``overrides`` applied), its
    workdir in ``root``."""
    return PointSpec.from_config(*point_config(sweep, point, scale, overrides), sweep, point,
                                 scale, root)
