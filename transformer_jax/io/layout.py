"""Where everything lives: every file and folder name of a workdir and of a sweep root,
defined once. The modules that write or read them import the names from here.

A workdir (one training run)::

    WORKDIR/
      config.json            the run's config (CONFIG); config_changes.jsonl (CONFIG_CHANGES)
      checkpoints/           orbax checkpoints, one folder a step (CHECKPOINTS)
      vocab/spm.model        the shared SentencePiece vocabulary (VOCAB / VOCAB_MODEL);
      vocab/row_len.json     the row length chosen from the data (ROW_LEN)
      vocab/tokens/          each split's token ids, keyed by what made them (TOKEN_CACHE,
                             TOKEN_CACHE_FILE: train-<key>.array_record), unless the run
                             is a point of a sweep or names data.token_cache_dir
                             (:func:`token_cache_dir`)
      metrics.jsonl          every logged metric, one JSON record a line (METRICS)
      final_metrics.json     written once, when the run has finished or stopped itself
                             (FINAL_METRICS)
      provenance.json        code, command, versions, machine of each start (PROVENANCE)
      hold.json              the live run's claim on the workdir (HOLD)
      tb/                    TensorBoard event files (TENSORBOARD)
      sweep_point.json       a sweep's record of the point and its attempts (SWEEP_POINT)
      eval/                  translations and scores of evaluations (EVAL); the end of
                             training's test translations (FINAL_HYPOTHESES, FINAL_REFERENCES)
                             and sentence statistics (SENTENCE_STATS)
      pictures/, profile/    attention pictures (PICTURES), profiler traces (PROFILE)

A sweep root holds ``sweep.json`` (SWEEP) and one workdir a point; ``tokens/``
(TOKEN_CACHE), the token caches every point reads; a search's root also its study
(STUDY_JOURNAL, Optuna's journal file, unless the study is in a database) and the plots of
its report (SEARCH_PLOTS).
"""

from __future__ import annotations

from transformer_jax.io import storage

CONFIG = "config.json"
CONFIG_CHANGES = "config_changes.jsonl"
CHECKPOINTS = "checkpoints"
# A checkpoint's meta item, as orbax writes it: checkpoints/<step>/meta/metadata (JSON).
CHECKPOINT_META = "meta/metadata"
VOCAB = "vocab"
VOCAB_MODEL = "spm.model"
ROW_LEN = "row_len.json"
TOKEN_CACHE = "tokens"
TOKEN_CACHE_FILE = "{split}-{key}.array_record"
TOKEN_CACHE_KEY_CHARS = 16  # of the key's hex digest, in the file name
METRICS = "metrics.jsonl"
FINAL_METRICS = "final_metrics.json"
# final_metrics.json of a stopped run reopened to go on (a pruned trial promoted by a search)
REOPENED_STOP = "reopened_stop.json"
PROVENANCE = "provenance.json"
HOLD = "hold.json"
TENSORBOARD = "tb"
SWEEP_POINT = "sweep_point.json"
EVAL = "eval"
FINAL_HYPOTHESES = f"{EVAL}/test-final.hyp.txt"
FINAL_REFERENCES = f"{EVAL}/test-final.ref.txt"
# The end of training's sentence statistics (evaluation/sentence_stats.py): test BLEU and
# chrF, validation NLL, sentence by sentence.
SENTENCE_STATS = f"{EVAL}/sentence_stats.npz"
PICTURES = "pictures"
PROFILE = "profile"
SWEEP = "sweep.json"
STUDY_JOURNAL = "study.journal"
SEARCH_PLOTS = {"history": "search_history.png", "importances": "search_importances.png",
                "slices": "search_slices.png"}


def token_cache_dir(workdir: storage.PathLike, configured: str = "") -> storage.Path:
    """Where the token caches a run reads and writes live: ``configured``
    (``data.token_cache_dir``) when set; for a point of a sweep (a workdir whose parent holds
    SWEEP) the sweep root's TOKEN_CACHE folder, which every point shares; otherwise the
    workdir's own, beside its vocabulary. A cache's file name holds its key (the vocabulary
    and the data), so runs of other vocabularies or data share a folder without sharing a
    file."""
    if configured:
        return storage.path(configured)
    workdir = storage.path(workdir)
    if (workdir.parent / SWEEP).exists():
        return workdir.parent / TOKEN_CACHE
    return workdir / VOCAB / TOKEN_CACHE
