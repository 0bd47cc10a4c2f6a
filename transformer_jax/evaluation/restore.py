"""A trained workdir's model: the parameters of its last checkpoints (averaged as the paper
evaluates), the model they fit and the vocabulary, for the commands that decode. The run's
settings they read come in a :class:`WorkdirSpec`, which the command builds once from the
workdir's config (``resume.workdir_config``, its overrides applied)."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.decoding.decode import DecodeConfig
from transformer_jax.errors import UserError
from transformer_jax.io import checkpoints, layout, storage
from transformer_jax.model import counts
from transformer_jax.model.spec import TransformerConfig


@dataclasses.dataclass(frozen=True)
class WorkdirSpec:
    """What the commands that use a trained run's model read of its config, read once: the
    model (its vocabulary the size the config asks for, until the checkpoints say the run's),
    decoding, the checkpoints kept and averaged, the languages, and the config as JSON (what
    an export records beside the model). The data's own settings, for the commands that read
    a split, are its DataSpec."""

    model: TransformerConfig
    model_record: str  # the model section as config.json holds it, JSON (resume.model_record)
    decode: DecodeConfig
    keep_checkpoints: int
    average: int  # config.checkpoints_to_average: the last this many
    source_lang: str
    target_lang: str
    record: str  # the whole config, JSON

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> WorkdirSpec:
        """The spec of a workdir's config (validated: ``resume.workdir_config``)."""
        return cls(TransformerConfig.from_config(config.model, config.data.vocab_size),
                   json.dumps(resume.model_record(config)),
                   DecodeConfig.from_config(config.decode), config.train.keep_checkpoints,
                   config_lib.checkpoints_to_average(config), config.data.source_lang,
                   config.data.target_lang, json.dumps(config.to_dict(), default=str))


@dataclasses.dataclass
class Loaded:
    """What decoding needs from a workdir: parameters, model, vocabulary."""

    params: Any
    model_config: TransformerConfig
    tokenizer: Tokenizer
    steps: list[int]  # the checkpoints whose parameters were averaged (one: not averaged)
    notes: list[str] = dataclasses.field(default_factory=list)  # one-line warnings for the user


def load_workdir(workdir: storage.PathLike, run: WorkdirSpec,
                 average: int | None = None) -> Loaded:
    """The model of a training run: ``run`` is the spec of its config; the parameters are the
    mean of the last ``average`` checkpoints (1: the latest alone). ``average=None`` takes
    the config's number (``run.average``, config.checkpoints_to_average: 5 for base, 20 for
    big), or every checkpoint the workdir holds if fewer, saying so in ``notes``. Raises
    UserError if ``average`` is more than the workdir holds."""
    workdir = storage.path(workdir)
    vocab = workdir / layout.VOCAB / layout.VOCAB_MODEL
    if not vocab.is_file():
        raise UserError(f"{vocab}: no vocabulary; --workdir must be the workdir of a training "
                        "run")
    if not (workdir / layout.CHECKPOINTS).is_dir():
        raise UserError(f"{workdir / 'checkpoints'}: no checkpoints; train first")
    ckpts = checkpoints.Checkpoints(workdir, run.keep_checkpoints)
    notes: list[str] = []
    try:
        steps = ckpts.all_steps()
        if not steps:
            raise UserError(f"{ckpts.directory}: no checkpoints; train first")
        meta = ckpts.read_meta(steps[-1])
        vocab_size = meta.get("vocab_size")
        where = ckpts.directory / str(steps[-1]) / "meta"
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise UserError(f"checkpoint metadata {where}: vocab_size={vocab_size!r} is not a "
                            "number of pieces; the checkpoint is damaged")
        tokenizer = Tokenizer(vocab)
        if tokenizer.vocab_size != vocab_size:
            raise UserError(f"{vocab} has {tokenizer.vocab_size} pieces but the model of "
                            f"{ckpts.directory / str(steps[-1])} was trained with {vocab_size}: "
                            "the vocabulary is not the run's")
        resume.check_recorded_model(meta.get(resume.MODEL_RECORD), json.loads(run.model_record),
                                    str(ckpts.directory / str(steps[-1])),
                                    str(workdir / layout.CONFIG))
        model_config = run.model.replace(vocab_size=vocab_size)
        template = counts.param_shapes(model_config)
        if average is None:
            params, used, notes = ckpts.average_last(template, run.average)
        elif average == 1:
            params, used = ckpts.restore_params(steps[-1], template), [steps[-1]]
        elif average > 1:
            params, used = ckpts.average_params(template, average)
            notes = [n for n in [checkpoints.early_span(used)] if n]
        else:
            raise UserError(f"--average={average} must be >= 1")
    finally:
        ckpts.close()
    logging.info("model from %s: checkpoint(s) %s", workdir, ", ".join(map(str, used)))
    return Loaded(params, model_config, tokenizer, used, notes)
