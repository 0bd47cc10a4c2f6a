"""The config's fields and their defaults: the paper's Transformer (base) and its WMT14 EN-DE
training recipe."""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from transformer_jax import paper
from transformer_jax.config import datasets
from transformer_jax.model.spec import TransformerConfig

# The fields of the config's ``model`` section: every hyperparameter of TransformerConfig but
# the vocabulary (the data's) and the switches the code sets (evaluation, decoding, the
# position scale of decode.position_scale).
MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerConfig)
                     if f.name not in ("vocab_size", "deterministic", "decode", "position_scale"))

# The seed of a sweep's seed axis sets all of these: initialisation and dropout, and the
# order of the training data.
SEED_FIELDS = ("train.seed", "data.shuffle_seed")


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
    d.name = datasets.DEFAULT  # a dataset of config/datasets/
    # The dataset whose settings (its Dataset's, the variant's own for it) the config holds;
    # a change of data.name through apply_overrides brings the new dataset's settings.
    d.defaults_for = datasets.DEFAULT
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
    # Read each split's token ids from a cache written once on first use (data/token_cache.py)
    # instead of tokenizing every pair every epoch; same batches. It is shared by every run of
    # the same vocabulary and data: "" keeps it in the sweep root's tokens/ for the points of
    # a sweep, in the workdir's vocab/tokens/ otherwise; a path (local or gs://) keeps it
    # there. A process waits at most token_cache_wait_s seconds for another that writes it,
    # then tokenizes on the fly. None of the three changes the batches.
    d.token_cache = True
    d.token_cache_dir = ""
    d.token_cache_wait_s = 3600.0
    # The data is read in this many shards (0: one per process). The batches depend on it, not
    # on the number of processes: set it to compare runs with different process counts.
    d.num_shards = 0
    d.shuffle_seed = 0

    c.optim = o = ml_collections.ConfigDict()
    o.b1 = 0.9
    o.b2 = 0.98
    o.eps = 1e-9
    # The learning-rate schedule: a module of transformer_jax/training/schedules/ (or of a
    # directory of TRANSFORMER_JAX_SCHEDULES), which checks the name. "rsqrt_warmup" is the
    # paper's, d_model^-0.5 * min(step^-0.5, step * warmup^-1.5); "warmup_cosine" decays from
    # the same peak to min_lr_ratio of it.
    o.schedule = "rsqrt_warmup"
    o.warmup_steps = 4000
    o.lr_scale = 1.0  # multiplies the schedule's learning rate
    o.min_lr_ratio = 0.1  # warmup_cosine: the rate at the last step, as a fraction of the peak
    # Micro-batches an optimizer step sums (data.tokens_per_batch is split among them): the
    # loss is per target token of the whole step, Adam applied once, steps counted once.
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
    # A checkpoint or log write that has not returned after this many seconds (a stalled
    # disk or file server) stops the run in one line (docs/faults.md).
    t.write_timeout_s = 120.0
    # Checkpoints averaged for evaluation (the end of training, evaluate, translate); 0: all
    # that are kept. Separate from keep_checkpoints, which is about disk space and falling
    # back from a damaged checkpoint: a run may keep more than it averages (the demo).
    t.average_checkpoints = 0
    # "sharded": jax.jit over a ("data", "model") device mesh, XLA placing the collectives;
    # "pmap": the design card's replicas, gradients all-reduced in the step (docs/scale.md).
    t.parallel = "sharded"
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
    # A run whose training loss, at divergence_patience evaluations in a row after
    # optim.warmup_steps, was not finite or above divergence_factor times its best so far
    # stops as diverged, with a checkpoint (training/stops.py); False trains on.
    t.stop_on_divergence = True
    t.divergence_factor = 1.5
    t.divergence_patience = 3

    # A run that is a trial of an Optuna study (sweeps' search): at each evaluation it
    # reports its objective to the trial and stops as pruned when the pruner says so.
    c.search = s = ml_collections.ConfigDict()
    s.storage = ""  # a database URL (sqlite:///study.db) or a journal file; "": not a trial
    s.study = ""  # the study's name
    s.trial = 0  # the trial's number in the study
    s.objective = "perplexity"  # a validation figure, io/metric_keys.py OBJECTIVES
    # The pruner, a module of studies/pruners/ (which checks the name): "asha" (successive
    # halving from the first rung), "median" (optuna's MedianPruner) or "none". The default
    # pruner of every search and pruned grid is this one.
    s.prune = "asha"
    s.startup_trials = 5  # median: no pruning before this many trials have completed
    # No pruning before this optimizer step (median's n_warmup_steps; asha's min_resource,
    # its first rung, with 0 for optuna's "auto").
    s.min_steps = 0
    s.reduction_factor = 3  # asha: the best 1/3 of the trials at a rung go on (Hyperband's eta)
    # asha: the first this many trials to reach the first rung stop there, the reference the
    # later ones are ranked against (a search's start-up trials); 0: none.
    s.reference_trials = 0

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
    # Positions are multiplied by this when translating: position interpolation (Chen et al.,
    # 2023) for schemes that take fractional positions (sinusoidal, rotary). A model trained
    # on sentences up to L tokens reads L / scale with the distances it knows. 1: off.
    dc.position_scale = 1.0
    return c
