"""A training run's settings, read once from its experiment config into frozen specs.

:meth:`TrainingSpec.from_config` validates the config (config.validate, the schedule's and
the pruner's names and settings) and reads every field training uses into one spec a part:
the model (:class:`~transformer_jax.model.spec.TransformerConfig`), the data
(:class:`~transformer_jax.data.pipeline.DataSpec`), the optimiser and its schedule
(:class:`OptimSpec`), the loop (:class:`LoopSpec`), checkpoints (:class:`CheckpointSpec`),
evaluation (:class:`EvalSpec`, decoding's :class:`~transformer_jax.decoding.decode.DecodeConfig`
in it) and the run's own stops (:class:`StopSpec`). The entry point builds it, and the
training code below takes the specs, never the config: a setting followed through the code
goes down from here and never back up. The config itself travels only as the JSON recorded
in the workdir (``record``, resume.remember_config).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.data.pipeline import DataSpec
from transformer_jax.decoding.decode import DecodeConfig
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.studies import pruners
from transformer_jax.training import schedules


@dataclasses.dataclass(frozen=True)
class OptimSpec:
    """Adam's settings, the learning-rate schedule (``optim.schedule`` and the values of the
    fields it reads, its FIELDS) and what the train step's loss takes."""

    b1: float
    b2: float
    eps: float
    schedule: str
    schedule_settings: tuple[tuple[str, Any], ...]  # (dotted field, value), FIELDS' order
    grad_accum_steps: int
    label_smoothing: float

    @property
    def settings(self) -> dict[str, Any]:
        """{"optim.warmup_steps": 4000, ...}: the schedule's fields and their values."""
        return dict(self.schedule_settings)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> OptimSpec:
        o = config.optim
        return cls(o.b1, o.b2, o.eps, o.schedule, tuple(schedules.settings(config).items()),
                   o.grad_accum_steps, config.train.label_smoothing)


@dataclasses.dataclass(frozen=True)
class LoopSpec:
    """The training loop's own settings (the ``train`` section's)."""

    num_steps: int
    seed: int
    log_every: int
    parallel: str  # "sharded" or "pmap"
    model_parallel: int
    devices: int  # local devices to train on; 0: all
    peak_flops: float
    profile_start: int
    profile_steps: int
    nonfinite: str  # "stop" or "skip"
    max_nonfinite_in_a_row: int
    write_timeout_s: float  # a checkpoint or log write that takes longer stops the run

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> LoopSpec:
        t = config.train
        return cls(t.num_steps, t.seed, t.log_every, t.parallel, t.model_parallel, t.devices,
                   float(t.peak_flops), t.profile_start, t.profile_steps, t.nonfinite,
                   t.max_nonfinite_in_a_row, float(t.write_timeout_s))


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """When checkpoints are written, how many are kept and how many evaluation averages."""

    every: int
    every_minutes: float
    keep: int
    average: int  # config.checkpoints_to_average: the last this many

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> CheckpointSpec:
        t = config.train
        return cls(t.checkpoint_every, float(t.checkpoint_every_minutes), t.keep_checkpoints,
                   config_lib.checkpoints_to_average(config))


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """Evaluation as the run goes and at its end: validation loss, BLEU, samples, pictures
    (of the data's splits: DataSpec)."""

    every: int
    batches: int  # of the validation split; 0: all of it
    bleu_every: int
    bleu_sentences: int
    samples: int
    visualize_sentences: tuple[int, ...]
    decode: DecodeConfig

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> EvalSpec:
        t = config.train
        return cls(t.eval_every, t.eval_batches, t.bleu_every, t.bleu_sentences, t.samples,
                   tuple(t.visualize_sentences), DecodeConfig.from_config(config.decode))


@dataclasses.dataclass(frozen=True)
class StopSpec:
    """The run's own stops: divergence (training/stops.py's Divergence) and, for a trial of
    an Optuna study, the ``search`` section its TrialWatch and pruner read."""

    stop_on_divergence: bool
    divergence_factor: float
    divergence_patience: int
    after_step: int  # optim.warmup_steps: no divergence is judged before
    search: ml_collections.FrozenConfigDict

    @property
    def trial(self) -> bool:
        """Whether the run is a trial of a study (``search.storage`` set)."""
        return bool(self.search.storage)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> StopSpec:
        t = config.train
        return cls(t.stop_on_divergence, float(t.divergence_factor), t.divergence_patience,
                   config.optim.warmup_steps, ml_collections.FrozenConfigDict(config.search))


@dataclasses.dataclass(frozen=True)
class TrainingSpec:
    """Every setting of a training run, one spec a part; built once, by
    :meth:`from_config`."""

    variant: str
    scale: str
    # vocab_size is data.vocab_size, the size asked for, until the run reads its vocabulary
    # (``with_vocab``).
    model: TransformerConfig
    data: DataSpec
    optim: OptimSpec
    loop: LoopSpec
    checkpoints: CheckpointSpec
    evaluation: EvalSpec
    stops: StopSpec
    record: str  # the config as JSON: what resume.remember_config records in the workdir
    model_record: str  # its model section as a checkpoint records it, JSON
    # What TensorBoard shows of a run outside a sweep: Table 3's quantities, and the seeds.
    table3: tuple[tuple[str, Any], ...]
    seeds: tuple[tuple[str, Any], ...]

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> TrainingSpec:
        """Validates ``config`` (ConfigError naming the field) and reads it."""
        config_lib.validate(config)
        model = TransformerConfig.from_config(config.model, config.data.vocab_size)
        optim = OptimSpec.from_config(config)
        schedules.make(optim.schedule, optim.settings, model.d_model)  # it can follow them
        pruners.get(config.search.prune)
        return cls(config.variant, config.scale, model, DataSpec.from_config(config), optim,
                   LoopSpec.from_config(config), CheckpointSpec.from_config(config),
                   EvalSpec.from_config(config), StopSpec.from_config(config),
                   config.to_json_best_effort(), json.dumps(resume.model_record(config)),
                   tuple((q, config_lib.quantity(config, q)) for q in config_lib.QUANTITIES),
                   tuple((f, config_lib.get_field(config, f)) for f in config_lib.SEED_FIELDS))

    def with_vocab(self, vocab_size: int) -> TrainingSpec:
        """The spec with the model's vocabulary the run's (its tokenizer's)."""
        return dataclasses.replace(self, model=self.model.replace(vocab_size=vocab_size))

    @property
    def recorded(self) -> dict[str, Any]:
        return json.loads(self.record)

    @property
    def recorded_model(self) -> Mapping[str, Any]:
        return json.loads(self.model_record)
