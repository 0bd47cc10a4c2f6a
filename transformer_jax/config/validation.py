"""Validation: every field the code relies on, checked before anything is compiled, refused
in one ConfigError naming the field and what it allows."""

from __future__ import annotations

import math
from collections.abc import Collection

import ml_collections

from transformer_jax.config import datasets
from transformer_jax.config.fields import derived_dims, get_field
from transformer_jax.config.scales import SCALES
from transformer_jax.decoding import strategies
from transformer_jax.errors import ConfigError
from transformer_jax.io import metric_keys
from transformer_jax.model import kernels, positions
from transformer_jax.model.spec import DROPOUT_IMPLEMENTATIONS
from transformer_jax.plugins import Registry

# Fields naming an entry of a registry: its names, as they are when a config is checked (a
# dataset registered since counts), are the field's choices, and its refusal (one line naming
# the field and the names) is the field's.
REGISTRIES: dict[str, Registry] = {
    "model.positions": positions.REGISTRY,
    "model.attention": kernels.REGISTRY,
    "data.name": datasets.REGISTRY,
    "data.defaults_for": datasets.REGISTRY,
    "decode.strategy": strategies.REGISTRY,
}
# Fields holding one of a set of strings: the registries' names, then plain enumerations.
CHOICES: dict[str, Collection[str]] = {
    **REGISTRIES,
    "model.norm": ("post", "pre"),
    "model.dtype": ("float32", "bfloat16"),
    "model.dropout_impl": DROPOUT_IMPLEMENTATIONS,
    "train.parallel": ("pmap", "sharded"),
    "train.nonfinite": ("skip", "stop"),
    "search.objective": metric_keys.OBJECTIVES,
    "scale": tuple(SCALES),
}

# Fields holding strings without a fixed set of values ("" allowed where it means a default).
STRINGS = ("variant", "optim.schedule", "data.data_dir", "data.source_lang", "data.target_lang",
           "data.train_files", "data.eval_files", "data.test_files", "data.token_cache_dir",
           "search.storage", "search.study", "search.prune")
BOOLS = ("model.share_embeddings", "model.remat", "data.packing", "data.token_cache",
         "train.stop_on_divergence")
# Integer fields and their lowest allowed value. Every integer is also at most INT_MAX (the
# int32 of JAX's arrays and step counters), the seeds at most SEED_MAX and model.max_len at
# most MAX_POSITIONS (HIGHEST): a value past these would pass here and fail later, or be cut
# to fewer bits and silently repeat another.
INTS: dict[str, int] = {
    **dict.fromkeys([
        "model.num_layers", "model.d_model", "model.d_ff", "model.num_heads", "model.max_len",
        "model.block_size", "model.local_window", "data.vocab_size", "data.max_len",
        "data.tokens_per_batch", "data.vocab_sample", "optim.warmup_steps",
        "optim.grad_accum_steps", "train.num_steps", "train.log_every", "train.eval_every",
        "train.checkpoint_every", "train.keep_checkpoints", "train.model_parallel",
        "train.max_nonfinite_in_a_row", "train.divergence_patience", "decode.beam_size",
        "decode.batch_size"], 1),
    "search.reduction_factor": 2,
    **dict.fromkeys([
        "model.d_k", "model.d_v", "model.num_kv_heads", "data.num_shards", "data.row_len",
        "data.shuffle_seed", "train.seed",
        "train.eval_batches", "train.devices", "train.profile_steps", "train.profile_start",
        "train.bleu_sentences", "train.bleu_every", "train.samples", "decode.max_len_offset",
        "train.average_checkpoints",
        "decode.top_k", "decode.seed", "search.trial", "search.startup_trials",
        "search.min_steps", "search.reference_trials"], 0),
}
# The local_global kernel's global positions and the performer kernel's random features.
INTS.update({"model.global_tokens": 0, "model.random_features": 1})
INT_MAX = 2**31 - 1
# JAX's keys (without 64-bit mode) and Optuna's samplers keep 32 bits of a seed: seed 2**32
# would give the keys of seed 0.
SEED_MAX = 2**32 - 1
# The position table (sinusoidal or learned) has a row per position: 2**20 rows of a
# d_model-1024 model are 4 GiB.
MAX_POSITIONS = 2**20
# Each layer is traced in Python before anything runs: 100 layers took about 12 s of CPU in
# `python -m transformer_jax.params` (2-core AMD EPYC, shared, 2026-12-02), so 100,000 would
# take hours, a wait without end to the user; the deepest models published are near 100.
MAX_LAYERS = 256
_WHY_HIGHEST = {INT_MAX: "2**31 - 1, an int32", SEED_MAX: "2**32 - 1: seeds keep 32 bits",
                MAX_POSITIONS: "2**20 positions",
                MAX_LAYERS: "each layer is traced before the first step"}
HIGHEST: dict[str, int] = {"train.seed": SEED_MAX, "data.shuffle_seed": SEED_MAX,
                           "decode.seed": SEED_MAX, "model.max_len": MAX_POSITIONS,
                           "model.num_layers": MAX_LAYERS}
# Float fields: (low, high, low_open, high_open).
FLOATS: dict[str, tuple[float, float, bool, bool]] = {
    "model.dropout_rate": (0.0, 1.0, False, True),
    "model.attention_dropout_rate": (0.0, 1.0, False, True),
    "train.label_smoothing": (0.0, 1.0, False, True),
    "optim.b1": (0.0, 1.0, False, True),
    "optim.b2": (0.0, 1.0, False, True),
    "optim.eps": (0.0, math.inf, True, False),
    "optim.lr_scale": (0.0, math.inf, True, False),
    "train.divergence_factor": (1.0, math.inf, True, False),
    "optim.min_lr_ratio": (0.0, 1.0, False, False),
    "decode.alpha": (0.0, math.inf, False, False),
    "decode.temperature": (0.0, math.inf, False, False),
    "decode.top_p": (0.0, 1.0, True, False),
    "decode.position_scale": (0.0, math.inf, True, False),
    "train.peak_flops": (0.0, math.inf, False, False),
    "train.checkpoint_every_minutes": (0.0, math.inf, False, False),
    "train.write_timeout_s": (0.0, math.inf, True, False),
    "data.token_cache_wait_s": (0.0, math.inf, False, False),
}


def validate(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Checks every field the code relies on; returns ``c`` or raises ConfigError naming the
    field and what it allows. Each field alone first (type, range, choices), then the
    fields that constrain each other."""
    _check_fields(c)
    m = c.model
    for field in ("d_k", "d_v"):
        if m[field] == 0 and m.d_model % m.num_heads:
            raise ConfigError(
                f"model.num_heads={m.num_heads} must divide model.d_model={m.d_model} "
                f"when model.{field} is derived (0); set model.{field} explicitly or change "
                "num_heads")
    if m.num_kv_heads and m.num_heads % m.num_kv_heads:
        raise ConfigError(f"model.num_kv_heads={m.num_kv_heads} must divide "
                          f"model.num_heads={m.num_heads} (each key/value head serves a group "
                          "of query heads)")
    if c.train.model_parallel > 1 and c.train.parallel != "sharded":
        raise ConfigError(f"train.model_parallel={c.train.model_parallel} needs "
                          "train.parallel='sharded'")
    if c.train.bleu_every and not c.train.bleu_sentences:
        raise ConfigError(f"train.bleu_every={c.train.bleu_every} needs train.bleu_sentences "
                          ">= 1 (the validation sentences to decode)")
    _check_search(c)
    if c.train.average_checkpoints > c.train.keep_checkpoints:
        raise ConfigError(f"train.average_checkpoints={c.train.average_checkpoints} exceeds "
                          f"train.keep_checkpoints={c.train.keep_checkpoints}; a run cannot "
                          "average checkpoints it does not keep")
    kernel = kernels.get(m.attention).traits
    if m.attention_dropout_rate > 0 and not kernel.supports_dropout:
        raise ConfigError(f"model.attention_dropout_rate={m.attention_dropout_rate} needs a "
                          "kernel that supports attention dropout "
                          f"({', '.join(kernels.having('supports_dropout'))}); the "
                          f"{m.attention!r} kernel has none")
    if kernel.needs_equal_head_dims and derived_dims(m)[0] != derived_dims(m)[1]:
        raise ConfigError(f"model.attention={m.attention!r} needs d_k == d_v, got "
                          f"{derived_dims(m)[0]} and {derived_dims(m)[1]}")
    scheme = positions.get(m.positions).traits
    if scheme.even_head_dims and derived_dims(m)[0] % 2:
        raise ConfigError(f"model.positions={m.positions!r} turns pairs of dimensions and needs "
                          f"an even d_k, got {derived_dims(m)[0]}")
    if c.decode.position_scale != 1.0 and not scheme.interpolates:
        raise ConfigError(f"decode.position_scale={c.decode.position_scale} needs positions "
                          f"that take fractions ({', '.join(positions.having('interpolates'))}); "
                          f"model.positions={m.positions!r} has a row per position")
    if c.data.packing and not kernel.segment_ids:
        raise ConfigError(f"data.packing=True needs a kernel that keeps packed sentences apart; "
                          f"model.attention={m.attention!r} does not (set data.packing=False)")
    if c.data.max_len > m.max_len:
        raise ConfigError(
            f"data.max_len={c.data.max_len} exceeds model.max_len={m.max_len}; the model "
            "has no positions beyond model.max_len")
    if c.train.num_steps * c.optim.grad_accum_steps > INT_MAX:
        raise ConfigError(f"train.num_steps={c.train.num_steps} x optim.grad_accum_steps="
                          f"{c.optim.grad_accum_steps} micro-batches exceed {INT_MAX:,}, the "
                          "step counter's range")
    if c.data.row_len > c.data.max_len:
        raise ConfigError(f"data.row_len={c.data.row_len} exceeds data.max_len="
                          f"{c.data.max_len}; a row holds at most the longest pair kept")
    dataset = datasets.get(c.data.name)
    if dataset.source == "text":
        _check_text_files(c, dataset)
    else:
        given = [f"{f}={get_field(c, f)!r}" for f in TEXT_FIELDS if get_field(c, f)]
        if given:
            raise ConfigError(f"{', '.join(given)}: data.name={c.data.name!r} reads no text "
                              f"files; train on them with data.name='text' "
                              "(--config=configs/text.py) or leave the field empty")
    return c


TEXT_FIELDS = ("data.train_files", "data.eval_files", "data.test_files")


def check_value(path: str, value: object) -> None:
    """Checks one field's ``value`` on its own (its type, range or choices) as
    :func:`validate` would; ConfigError naming the field. Fields without a rule of their own
    (checked only with the others) pass."""
    c = ml_collections.ConfigDict({"v": value})
    if path in INTS:
        _check_int(c, "v", INTS[path], path)
    elif path in FLOATS:
        _check_float(c, "v", *FLOATS[path], name=path)
    elif path in BOOLS and not isinstance(value, bool):
        raise ConfigError(f"{path}={value!r} must be True or False")
    elif path in CHOICES:
        _check_choice(path, value)
    elif path in STRINGS:
        _check_string(path, value)


def _check_fields(c: ml_collections.ConfigDict) -> None:
    """Every field on its own: its type, and its range or choices."""
    for path in STRINGS:
        _check_string(path, get_field(c, path))
    if not c.variant.strip():  # the base model would train under no name
        raise ConfigError(f"variant={c.variant!r} names no variant; it is chosen in the "
                          "config argument, e.g. --config=configs/base.py:big")
    for path in BOOLS:
        value = get_field(c, path)
        if not isinstance(value, bool):
            raise ConfigError(f"{path}={value!r} must be True or False")
    for path, low in INTS.items():
        _check_int(c, path, low)
    for path, (low, high, low_open, high_open) in FLOATS.items():
        _check_float(c, path, low, high, low_open, high_open)
    for path in CHOICES:
        _check_choice(path, get_field(c, path))
    sentences = c.train.visualize_sentences
    if not isinstance(sentences, tuple | list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in sentences):
        raise ConfigError(f"train.visualize_sentences={sentences!r} must be a tuple of "
                          "test-split indices >= 0, e.g. (49, 181)")


def _check_search(c: ml_collections.ConfigDict) -> None:
    """A trial names its study, and its objective is measured at evaluations."""
    s, t = c.search, c.train
    if s.storage and not s.study.strip():
        raise ConfigError(f"search.storage={s.storage!r} needs search.study, the name of the "
                          "study the run is a trial of")
    if s.objective == metric_keys.BLEU and s.storage and (
            not t.bleu_every or t.bleu_every % t.eval_every):
        raise ConfigError(f"search.objective='bleu' needs train.bleu_every, a multiple of "
                          f"train.eval_every={t.eval_every} (validation BLEU measured at "
                          f"evaluations), got {t.bleu_every}")


def _check_text_files(c: ml_collections.ConfigDict, dataset: datasets.Dataset) -> None:
    """A dataset of text files reads train and validation files, and test files when
    decoding at the end; each split's files are in the config field its Dataset names."""
    decodes = bool(c.train.bleu_sentences or c.train.samples)
    for split, path in dataset.splits.items():
        value = get_field(c, path)
        if not isinstance(value, str):
            raise ConfigError(f"{path}={value!r} must be a string")
        if not value.strip():
            if split != "test" or decodes:
                why = (" (for train.bleu_sentences and train.samples; set both to 0 to go "
                       "without)" if split == "test" else "")
                raise ConfigError(f"{path} is empty; data.name={c.data.name!r} needs "
                                  f"'source.txt,target.txt' or 'pairs.tsv'{why}")
            continue
        parts = value.split(",")
        if len(parts) > 2 or not all(p.strip() for p in parts):
            raise ConfigError(f"{path}={value!r} must be 'source.txt,target.txt' "
                              "or 'pairs.tsv'")


def _check_choice(path: str, value: object) -> None:
    if path in REGISTRIES:
        REGISTRIES[path].check(value, path)
    elif not isinstance(value, str) or value not in CHOICES[path]:
        raise ConfigError(f"{path}={value!r} is not one of {', '.join(CHOICES[path])}")


def _check_string(path: str, value: object) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"{path}={value!r} must be a string")
    if "\0" in value:  # no file name, URL or name holds one; the OS would refuse it later
        raise ConfigError(f"{path}={value!r} holds a NUL character")


def _check_int(c: ml_collections.ConfigDict, path: str, low: int, name: str = "") -> None:
    value, name = get_field(c, path), name or path
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name}={value!r} must be an integer >= {low}")
    high = HIGHEST.get(name, INT_MAX)
    if value > high:
        raise ConfigError(f"{name}={value} must be at most {high:,} ({_WHY_HIGHEST[high]})")


def _check_float(c: ml_collections.ConfigDict, path: str, low: float, high: float,
                 low_open: bool = False, high_open: bool = False, name: str = "") -> None:
    value = get_field(c, path)
    path = name or path
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high)
    if not ok:
        lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
        raise ConfigError(f"{path}={value!r} must be a number in {lo}{low}, {high}{hi}")
