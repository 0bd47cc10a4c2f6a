"""Experiment configuration: the paper's defaults, its named models, datasets and scales as
data, one way to override any field, and validation.

Every config file under ``configs/`` is a thin ``get_config(arg)`` calling :func:`from_arg`,
which builds a config from three tables (:func:`build`):

* ``VARIANTS`` -- the base model, the big model and every row of Table 3 of the paper, each a
  :class:`Variant`: dotted overrides of any section (``{"model.num_heads": 4, ...}``), the
  Table 3 row and quantity it varies, and overrides that hold on one dataset only (big on
  EN-FR: P_drop 0.1). The row sweeps (:func:`table3_rows`) are derived from it.
* ``DATASETS`` -- each dataset's own settings (languages, vocabulary size).
* ``SCALES`` -- the sizes at which any variant trains: ``paper`` and ``demo`` (CPU size); a
  variant keeps its ratios to the base model at every scale.

A config is a ``ml_collections.ConfigDict`` with five sections:

* ``model``  -- the architecture (names as in the paper: ``d_model``, ``d_ff``, ``num_heads``...)
* ``data``   -- which dataset, vocabulary and batching
* ``optim``  -- Adam and the warmup schedule
* ``train``  -- steps, label smoothing, logging, checkpoints, parallelism
* ``decode`` -- decoding strategy (the paper's beam search by default)

:func:`apply_overrides` is the one way to change fields by their dotted names (the command
line's ``--config.FIELD=VALUE``, sweeps' grids); :func:`validate` refuses an invalid config
with one :class:`ConfigError` naming the field and the allowed range, before anything is
compiled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import ml_collections
import numpy as np

from transformer_jax import paper
from transformer_jax.errors import ConfigError
from transformer_jax.model import kernels
from transformer_jax.model.spec import TransformerConfig, head_dims

# The fields of the config's ``model`` section: every hyperparameter of TransformerConfig but
# the vocabulary (the data's) and the switches the code sets (evaluation, decoding).
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerConfig)
                     if f.name not in ("vocab_size", "deterministic", "decode"))

# The quantities of Table 3, by the paper's column names: (config field, short tag). The tag
# names a row's sweep when the row varies several quantities (C_N, C_d, C_ff, D_drop, D_ls).
QUANTITIES: dict[str, tuple[str, str]] = {
    "N": ("model.num_layers", "N"),
    "d_model": ("model.d_model", "d"),
    "d_ff": ("model.d_ff", "ff"),
    "h": ("model.num_heads", "h"),
    "d_k": ("model.d_k", "dk"),
    "d_v": ("model.d_v", "dv"),
    "P_drop": ("model.dropout_rate", "drop"),
    "eps_ls": ("train.label_smoothing", "ls"),
    "positions": ("model.positions", "pos"),
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named model of the paper: dotted overrides of the base config.

    ``row`` and ``quantity`` name the Table 3 row and the quantity (a key of ``QUANTITIES``)
    the variant varies ("" for the base and big models); ``datasets`` holds overrides that
    apply on one dataset only.
    """

    overrides: Mapping[str, Any]
    row: str = ""
    quantity: str = ""
    datasets: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)


# Table 3 of the paper: each row is a set of overrides on the base model. Row A keeps
# h * d_k = 512 constant; row C's d_model rows change d_k = d_v with it.
VARIANTS: dict[str, Variant] = {
    "base": Variant({}),
    "A_h1": Variant({"model.num_heads": 1, "model.d_k": 512, "model.d_v": 512}, "A", "h"),
    "A_h4": Variant({"model.num_heads": 4, "model.d_k": 128, "model.d_v": 128}, "A", "h"),
    "A_h16": Variant({"model.num_heads": 16, "model.d_k": 32, "model.d_v": 32}, "A", "h"),
    "A_h32": Variant({"model.num_heads": 32, "model.d_k": 16, "model.d_v": 16}, "A", "h"),
    "B_dk16": Variant({"model.d_k": 16}, "B", "d_k"),
    "B_dk32": Variant({"model.d_k": 32}, "B", "d_k"),
    "C_N2": Variant({"model.num_layers": 2}, "C", "N"),
    "C_N4": Variant({"model.num_layers": 4}, "C", "N"),
    "C_N8": Variant({"model.num_layers": 8}, "C", "N"),
    "C_d256": Variant({"model.d_model": 256, "model.d_k": 32, "model.d_v": 32}, "C", "d_model"),
    "C_d1024": Variant({"model.d_model": 1024, "model.d_k": 128, "model.d_v": 128}, "C",
                       "d_model"),
    "C_ff1024": Variant({"model.d_ff": 1024}, "C", "d_ff"),
    "C_ff4096": Variant({"model.d_ff": 4096}, "C", "d_ff"),
    "D_drop0": Variant({"model.dropout_rate": 0.0}, "D", "P_drop"),
    "D_drop02": Variant({"model.dropout_rate": 0.2}, "D", "P_drop"),
    "D_ls0": Variant({"train.label_smoothing": 0.0}, "D", "eps_ls"),
    "D_ls02": Variant({"train.label_smoothing": 0.2}, "D", "eps_ls"),
    "E_learned": Variant({"model.positions": "learned"}, "E", "positions"),
    # The big model: 300K steps, the last 20 checkpoints averaged, written every 600 steps
    # (the paper's 10 minutes at its ~1.0 s a step). On EN-FR the paper uses P_drop 0.1.
    "big": Variant({"model.d_model": 1024, "model.d_ff": 4096, "model.num_heads": 16,
                    "model.dropout_rate": 0.3, "train.num_steps": 300_000,
                    "train.keep_checkpoints": 20, "train.checkpoint_every": 600},
                   datasets={"wmt14_enfr": {"model.dropout_rate": 0.1}}),
}

# Each dataset's own settings, applied after the variant's overrides.
DATASETS: dict[str, Mapping[str, Any]] = {
    "builtin": {"data.source_lang": "en", "data.target_lang": "de",
                "data.vocab_size": paper.VOCAB_SIZE_EN_DE},
    "wmt14_ende": {"data.source_lang": "en", "data.target_lang": "de",
                   "data.vocab_size": paper.VOCAB_SIZE_EN_DE},
    "wmt14_enfr": {"data.source_lang": "en", "data.target_lang": "fr",
                   "data.vocab_size": paper.VOCAB_SIZE_EN_FR},
    # Your own files: the languages and vocabulary size are yours to set.
    "text": {},
}


@dataclasses.dataclass(frozen=True)
class Scale:
    """A size at which every variant trains.

    ``base`` gives the base model's values at this scale of the fields that scale: each
    variant's value of such a field is multiplied by the base model's ratio (d_k and d_v
    scale with d_model; the number of heads never scales). ``overrides`` are the data,
    batch, schedule and evaluation settings of the scale; ``sweep`` what a sweep's points
    add at this scale (end-of-run BLEU).
    """

    base: Mapping[str, int]
    overrides: Mapping[str, Any]
    sweep: Mapping[str, Any]


SCALES: dict[str, Scale] = {
    # The paper's size. A sweep's points score BLEU on the 3,000 sentences of newstest2013
    # (what Table 3 reports) with beam search.
    "paper": Scale({}, {}, {"train.bleu_sentences": 3000, "train.samples": 0}),
    # CPU size: the base model becomes 3 layers, d_model 128, d_ff 512 for 450 steps of
    # ~2,000-token batches on the built-in corpus, trained and evaluated in minutes. A sweep's
    # points decode 300 sentences greedily (beam search would add minutes a point).
    "demo": Scale(
        {"model.num_layers": 3, "model.d_model": 128, "model.d_ff": 512,
         "train.num_steps": 450},
        {"model.max_len": 128, "data.vocab_size": 1000, "data.max_len": 64,
         "data.vocab_sample": 1_000_000,  # characters per side: plenty for 1,000 pieces
         # Small batches: on a CPU more updates per token reach a given BLEU sooner.
         "data.tokens_per_batch": 2048, "optim.warmup_steps": 300, "train.log_every": 50,
         "train.eval_every": 150, "train.eval_batches": 0,  # the whole validation split
         "train.checkpoint_every": 150,
         # Evaluate the latest parameters alone. The paper averages checkpoints from the last
         # 4-6% of its steps; here that is the last ~25 steps, less than one checkpoint
         # interval, and averaging the three (150, 300, 450), which span the whole run, cost
         # 18 BLEU.
         "train.average_checkpoints": 1,
         "train.bleu_sentences": 1000, "train.samples": 5,
         "decode.batch_size": 250},
        {"train.bleu_sentences": 300, "train.samples": 0, "decode.strategy": "greedy"}),
}

# The seed of a sweep's seed axis sets all of these: initialisation and dropout, and the
# order of the training data.
SEED_FIELDS = ("train.seed", "data.shuffle_seed")

CHOICES: dict[str, tuple[str, ...]] = {
    "model.positions": ("sinusoidal", "learned"),
    "model.norm": ("post", "pre"),
    "model.attention": kernels.names(),
    "model.dtype": ("float32", "bfloat16"),
    "model.dropout_impl": ("hash", "jax"),
    "data.name": tuple(DATASETS),
    "data.defaults_for": tuple(DATASETS),
    "train.parallel": ("pmap", "sharded"),
    "train.nonfinite": ("skip", "stop"),
    "decode.strategy": ("greedy", "beam", "sample"),
    "scale": tuple(SCALES),
}


def base_config() -> ml_collections.ConfigDict:
    """The paper's Transformer (base) and its WMT14 EN-DE training recipe."""
    c = ml_collections.ConfigDict()
    c.variant = "base"
    c.scale = "paper"  # a key of SCALES: "demo" when shrunk to CPU size

    # The model's defaults are the paper's base model, written once in model/spec.py;
    # d_k and d_v stay 0 here, derived as d_model // num_heads (head_dims).
    c.model = m = ml_collections.ConfigDict()
    for field in MODEL_FIELDS:
        value = getattr(TransformerConfig, field)
        # dtype as its name: "float32"; "bfloat16" for mixed precision
        m[field] = np.dtype(value).name if field == "dtype" else value
    m.d_k = m.d_v = 0

    c.data = d = ml_collections.ConfigDict()
    d.name = "wmt14_ende"
    # The dataset whose settings (DATASETS, the variant's own for it) the config holds; a
    # change of data.name through apply_overrides brings the new dataset's settings.
    d.defaults_for = "wmt14_ende"
    d.data_dir = ""  # TFDS data dir; "" = TFDS default (~/tensorflow_datasets)
    d.source_lang = "en"
    d.target_lang = "de"
    d.train_files = ""  # for name="text": "src.txt,tgt.txt" or "pairs.tsv"
    d.eval_files = ""
    d.test_files = ""
    d.vocab_size = paper.VOCAB_SIZE_EN_DE  # shared source-target BPE vocabulary
    d.vocab_sample = 10_000_000  # characters per side sampled to train the vocabulary
    d.max_len = 256  # tokens per sentence; longer pairs are counted and skipped
    # Slots per packed training row, at most max_len; pairs longer than a row are counted and
    # skipped, as those longer than max_len are. 0: chosen once from the data when the
    # vocabulary is built, for the built-in corpus and text files the smallest multiple of 64
    # that holds 99.9% of a sample of pairs (recorded in <workdir>/vocab/row_len.json, so a
    # resumed run keeps it), for WMT max_len. Evaluation keeps rows of max_len.
    d.row_len = 0
    d.tokens_per_batch = 25_000  # per side, per optimizer step, summed over devices
    d.packing = True
    # The data is read in this many shards (0: one per process). The batches depend on it, not
    # on the number of processes: set it to compare runs with different process counts.
    d.num_shards = 0
    d.shuffle_seed = 0

    c.optim = o = ml_collections.ConfigDict()
    o.b1 = 0.9
    o.b2 = 0.98
    o.eps = 1e-9
    o.warmup_steps = 4000
    o.lr_scale = 1.0  # multiplies d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    o.grad_accum_steps = 1

    c.train = t = ml_collections.ConfigDict()
    t.num_steps = 100_000
    t.label_smoothing = 0.1
    t.seed = 0
    t.log_every = 100
    t.eval_every = 2000
    t.eval_batches = 20  # batches of the validation split for loss/perplexity
    # The paper averages the last 5 checkpoints "written at 10-minute intervals" (base, about
    # 0.4 s a step on its 8 P100s): 1,500 steps apart, the last 6,000 steps of 100K. Big
    # (about 1.0 s a step) writes one every 600 steps (VARIANTS).
    t.checkpoint_every = 1500
    # > 0: a checkpoint whenever this many minutes of training have passed since the last
    # one (the paper's 10), instead of every checkpoint_every steps.
    t.checkpoint_every_minutes = 0.0
    t.keep_checkpoints = 5  # the base model averages the last 5
    # Checkpoints averaged for evaluation (the end of training, evaluate, translate); 0: all
    # that are kept. Separate from keep_checkpoints, which is about disk space and falling
    # back from a damaged checkpoint: a run may keep more than it averages (the demo).
    t.average_checkpoints = 0
    t.parallel = "pmap"  # or "sharded": jax.jit over a device mesh
    t.model_parallel = 1  # "sharded" only: devices per model replica (splits heads and d_ff)
    t.devices = 0  # local devices to train on; 0 = all of them
    t.peak_flops = 0.0  # per device, for MFU; 0 = known accelerator's or a CPU matmul probe
    t.profile_steps = 0  # > 0: write a profiler trace of this many steps to <workdir>/profile
    t.profile_start = 10  # first step traced (after compilation)
    # Sentences decoded for BLEU: of the validation split every bleu_every steps, and of the
    # test split at the end of training (0: none).
    t.bleu_sentences = 0
    t.bleu_every = 0  # steps between validation BLEU evaluations; 0: never during training
    t.samples = 0  # sample translations printed at the end of training
    # Indices into the test split: attention pictures of these sentences are written to
    # <workdir>/pictures at the end of training (visualize.py); () writes none.
    t.visualize_sentences = ()
    # A step whose loss or gradients are not finite changes nothing and is counted. "stop"
    # ends the run after max_nonfinite_in_a_row such steps in a row (a run that has
    # diverged), "skip" never stops. The paper says nothing; one bad step should not kill
    # a week-long run, and a diverged one should not train on for days.
    t.nonfinite = "stop"
    t.max_nonfinite_in_a_row = 10

    c.decode = dc = ml_collections.ConfigDict()
    dc.strategy = "beam"  # or "greedy", or "sample" (not in the paper)
    dc.beam_size = 4
    dc.alpha = 0.6  # GNMT length penalty ((5 + len) / 6) ** alpha
    dc.max_len_offset = 50  # maximum output length = input length + 50
    # Sampling (strategy="sample"): temperature 0 is greedy; top_k 0 and top_p 1 are off.
    dc.temperature = 1.0
    dc.top_k = 0
    dc.top_p = 1.0
    dc.seed = 0
    dc.batch_size = 64  # sentences per decoding batch (times beam_size hypotheses)
    return c


def build(variant: str = "base", dataset: str = "wmt14_ende",
          scale: str = "paper") -> ml_collections.ConfigDict:
    """The config of a named variant of ``VARIANTS`` on a named dataset at a named scale:
    the base config, the variant's overrides, the dataset's settings (and the variant's own
    for it), then the scale.

    Raises ConfigError naming the variant, dataset or scale if one is unknown.
    """
    for name, table, what in [(variant, VARIANTS, "variant"), (dataset, DATASETS, "dataset"),
                              (scale, SCALES, "scale")]:
        if name not in table:
            raise ConfigError(f"unknown {what} {name!r}; known: {', '.join(table)}")
    c = base_config()
    c.variant = variant
    _apply(c, VARIANTS[variant].overrides, f"variant {variant}")
    _apply(c, dataset_settings(variant, dataset), f"dataset {dataset}")
    c.data.name = c.data.defaults_for = dataset
    apply_scale(c, scale)
    return c


def dataset_settings(variant: str, dataset: str) -> dict[str, Any]:
    """The fields a dataset sets for a variant: its own settings, then the variant's for it."""
    return {**DATASETS[dataset], **VARIANTS[variant].datasets.get(dataset, {})}


def apply_scale(c: ml_collections.ConfigDict, scale: str) -> ml_collections.ConfigDict:
    """Brings a paper-size config to ``scale``, keeping the variant's ratios to the base model.

    Each field of the scale's ``base`` becomes the config's value times the scale's ratio to
    the base model (d_model 128/512 at demo scale: C_d1024 becomes 256, d_k and d_v scale with
    d_model, big's 300K steps become 1,350); the number of heads stays the variant's, so row A
    keeps h * d_k = d_model. Then the scale's data, batch and schedule settings.
    """
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; known: {', '.join(SCALES)}")
    s, paper_base = SCALES[scale], base_config()
    ratios = {path: size / _get(paper_base, path) for path, size in s.base.items()}
    if "model.d_model" in ratios:
        ratios.update(dict.fromkeys(("model.d_k", "model.d_v"), ratios["model.d_model"]))
    for path, ratio in ratios.items():
        value = _get(c, path)
        if value:  # 0 stays 0 (d_k, d_v derived as d_model // num_heads)
            set_field(c, path, max(1, round(value * ratio)))
    _apply(c, s.overrides, f"scale {scale}")
    c.scale = scale
    return c


def from_arg(arg: str | None, default_variant: str = "base",
             default_dataset: str = "wmt14_ende",
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


# ----------------------------------------------------------------------------------------
# Overrides by dotted name


def set_field(c: ml_collections.ConfigDict, path: str, value: Any, origin: str = "") -> None:
    """``c.a.b = value`` for ``path="a.b"``; ConfigError naming the field if it is unknown or
    the value's type does not fit (an int where a float is expected is taken)."""
    where = f"{origin}: " if origin else ""
    *parents, leaf = path.split(".")
    node = c
    for part in parents:
        if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
            raise ConfigError(f"{where}unknown config field {path}")
        node = node[part]
    if leaf not in node or isinstance(node[leaf], ml_collections.ConfigDict):
        raise ConfigError(f"{where}unknown config field {path}")
    try:
        node[leaf] = value
    except TypeError as e:
        raise ConfigError(f"{where}{path}={value!r}: {e}") from e


def _apply(c: ml_collections.ConfigDict, overrides: Mapping[str, Any], origin: str) -> None:
    for path, value in overrides.items():
        set_field(c, path, value, origin)


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
    _apply(c, overrides, origin)
    return c


def _switch_dataset(c: ml_collections.ConfigDict, dataset: str, origin: str) -> None:
    if dataset not in DATASETS:
        raise ConfigError(f"{origin}: data.name={dataset!r} is not one of "
                          f"{', '.join(DATASETS)}")
    if c.get("variant") not in VARIANTS:
        raise ConfigError(f"{origin}: data.name={dataset}: the settings of {dataset} are "
                          f"known for the variants of configs/table3.py, not "
                          f"{c.get('variant')!r}; start from a config file for {dataset} "
                          "(configs/wmt14_enfr.py, configs/wmt14_ende.py, configs/text.py)")
    scale = c.get("scale", "paper")
    before = build(c.variant, c.data.defaults_for, scale)
    after = build(c.variant, dataset, scale)
    fields = {path for table in [*DATASETS.values(),
                                 *(d for v in VARIANTS.values() for d in v.datasets.values())]
              for path in table}
    for path in sorted(fields):
        if _get(c, path) == _get(before, path):  # not changed by the config file or the user
            set_field(c, path, _get(after, path), origin)
    c.data.name = c.data.defaults_for = dataset


# ----------------------------------------------------------------------------------------
# Table 3's rows, derived from VARIANTS


def quantity(c: ml_collections.ConfigDict, name: str) -> Any:
    """The value of a Table 3 quantity (a key of QUANTITIES) in a config; d_k and d_v
    resolved when derived."""
    if name in ("d_k", "d_v"):
        return derived_dims(c.model)[0 if name == "d_k" else 1]
    return _get(c, QUANTITIES[name][0])


def table3_rows() -> dict[str, tuple[str, list[str]]]:
    """The sweeps of Table 3: {name: (quantity, [variant, ...])}, each row's variants and the
    base model in increasing order of the quantity (the base model first where the values
    are not numbers). Named after the row ("A", "B", "E"), or the row and the quantity's tag
    where a row varies several quantities ("C_N", "C_d", "C_ff", "D_drop", "D_ls")."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, v in VARIANTS.items():
        if v.row:
            groups.setdefault((v.row, v.quantity), []).append(name)
    rows = {}
    for (row, q), names in groups.items():
        several = len({qq for r, qq in groups if r == row}) > 1
        values = {n: quantity(build(n), q) for n in ["base", *names]}
        order = ["base", *names]
        if all(isinstance(x, int | float) for x in values.values()):
            order.sort(key=values.__getitem__)
        rows[f"{row}_{QUANTITIES[q][1]}" if several else row] = (q, order)
    return rows


def checkpoints_to_average(c: ml_collections.ConfigDict) -> int:
    """How many of the last checkpoints evaluation averages: train.average_checkpoints, or
    with 0 every kept one (train.keep_checkpoints)."""
    return c.train.average_checkpoints or c.train.keep_checkpoints


def derived_dims(m: ml_collections.ConfigDict) -> tuple[int, int]:
    """(d_k, d_v) of a config's model section, with 0 resolved to d_model // num_heads."""
    return head_dims(m.d_model, m.num_heads, m.d_k, m.d_v)


def _get(c: ml_collections.ConfigDict, path: str) -> Any:
    node = c
    for part in path.split("."):
        if part not in node:
            raise ConfigError(f"the config has no field {path}")
        node = node[part]
    return node


# Fields holding strings without a fixed set of values ("" allowed where it means a default).
STRINGS = ("variant", "data.data_dir", "data.source_lang", "data.target_lang",
           "data.train_files", "data.eval_files", "data.test_files")
BOOLS = ("model.share_embeddings", "model.remat", "data.packing")
# Integer fields and their lowest allowed value.
INTS: dict[str, int] = {
    **dict.fromkeys([
        "model.num_layers", "model.d_model", "model.d_ff", "model.num_heads", "model.max_len",
        "model.block_size", "model.local_window", "data.vocab_size", "data.max_len",
        "data.tokens_per_batch", "data.vocab_sample", "optim.warmup_steps",
        "optim.grad_accum_steps", "train.num_steps", "train.log_every", "train.eval_every",
        "train.checkpoint_every", "train.keep_checkpoints", "train.model_parallel",
        "train.max_nonfinite_in_a_row", "decode.beam_size", "decode.batch_size"], 1),
    **dict.fromkeys([
        "model.d_k", "model.d_v", "model.num_kv_heads", "data.num_shards", "data.row_len",
        "data.shuffle_seed", "train.seed",
        "train.eval_batches", "train.devices", "train.profile_steps", "train.profile_start",
        "train.bleu_sentences", "train.bleu_every", "train.samples", "decode.max_len_offset",
        "train.average_checkpoints",
        "decode.top_k", "decode.seed"], 0),
}
# Float fields: (low, high, low_open, high_open).
FLOATS: dict[str, tuple[float, float, bool, bool]] = {
    "model.dropout_rate": (0.0, 1.0, False, True),
    "model.attention_dropout_rate": (0.0, 1.0, False, True),
    "train.label_smoothing": (0.0, 1.0, False, True),
    "optim.b1": (0.0, 1.0, False, True),
    "optim.b2": (0.0, 1.0, False, True),
    "optim.eps": (0.0, math.inf, True, False),
    "optim.lr_scale": (0.0, math.inf, True, False),
    "decode.alpha": (0.0, math.inf, False, False),
    "decode.temperature": (0.0, math.inf, False, False),
    "decode.top_p": (0.0, 1.0, True, False),
    "train.peak_flops": (0.0, math.inf, False, False),
    "train.checkpoint_every_minutes": (0.0, math.inf, False, False),
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
    if c.data.packing and not kernel.segment_ids:
        raise ConfigError(f"data.packing=True needs a kernel that keeps packed sentences apart; "
                          f"model.attention={m.attention!r} does not (set data.packing=False)")
    if c.data.max_len > m.max_len:
        raise ConfigError(
            f"data.max_len={c.data.max_len} exceeds model.max_len={m.max_len}; the model "
            "has no positions beyond model.max_len")
    if c.data.row_len > c.data.max_len:
        raise ConfigError(f"data.row_len={c.data.row_len} exceeds data.max_len="
                          f"{c.data.max_len}; a row holds at most the longest pair kept")
    if c.data.name == "text":
        _check_text_files(c)
    return c


def _check_fields(c: ml_collections.ConfigDict) -> None:
    """Every field on its own: its type, and its range or choices."""
    for path in STRINGS:
        value = _get(c, path)
        if not isinstance(value, str):
            raise ConfigError(f"{path}={value!r} must be a string")
    for path in BOOLS:
        value = _get(c, path)
        if not isinstance(value, bool):
            raise ConfigError(f"{path}={value!r} must be True or False")
    for path, low in INTS.items():
        _check_int(c, path, low)
    for path, (low, high, low_open, high_open) in FLOATS.items():
        _check_float(c, path, low, high, low_open, high_open)
    for path, choices in CHOICES.items():
        value = _get(c, path)
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(f"{path}={value!r} is not one of {', '.join(choices)}")
    sentences = c.train.visualize_sentences
    if not isinstance(sentences, tuple | list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in sentences):
        raise ConfigError(f"train.visualize_sentences={sentences!r} must be a tuple of "
                          "test-split indices >= 0, e.g. (49, 181)")


def _check_text_files(c: ml_collections.ConfigDict) -> None:
    """data.name='text' reads train and eval files, and test files when decoding at the end."""
    decodes = bool(c.train.bleu_sentences or c.train.samples)
    for field, needed in [("train_files", True), ("eval_files", True), ("test_files", decodes)]:
        value = c.data[field]
        if not isinstance(value, str):
            raise ConfigError(f"data.{field}={value!r} must be a string")
        if not value.strip():
            if needed:
                why = (" (for train.bleu_sentences and train.samples; set both to 0 to go "
                       "without)" if field == "test_files" else "")
                raise ConfigError(f"data.{field} is empty; data.name='text' needs "
                                  f"'source.txt,target.txt' or 'pairs.tsv'{why}")
            continue
        parts = value.split(",")
        if len(parts) > 2 or not all(p.strip() for p in parts):
            raise ConfigError(f"data.{field}={value!r} must be 'source.txt,target.txt' "
                              "or 'pairs.tsv'")


def _check_int(c: ml_collections.ConfigDict, path: str, low: int) -> None:
    value = _get(c, path)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{path}={value!r} must be an integer >= {low}")


def _check_float(c: ml_collections.ConfigDict, path: str, low: float, high: float,
                 low_open: bool = False, high_open: bool = False) -> None:
    value = _get(c, path)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (
            value < high if high_open else value <= high)
    if not ok:
        lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
        raise ConfigError(f"{path}={value!r} must be a number in {lo}{low}, {high}{hi}")
