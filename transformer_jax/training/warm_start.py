"""A new run that starts from given parameters (an imported model): checkpoint 0 of its
workdir, holding those parameters, a fresh optimizer state and the data at its start, which
training resumes like any other checkpoint."""

from __future__ import annotations

from typing import Any

import jax
import ml_collections

from transformer_jax.config import resume
from transformer_jax.data import pipeline
from transformer_jax.io import checkpoints, storage
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.training import parallel
from transformer_jax.training.step import create_train_state


def save_initial(config: ml_collections.ConfigDict, workdir: storage.PathLike,
                 params: Any) -> None:
    """Writes checkpoint 0 of ``workdir`` (which holds the config's vocabulary) with
    ``params``, as ``Run`` would save it at step 0 of a new run."""
    data = pipeline.data_for(config, workdir, len(parallel.local_devices(config.train.devices)))
    model_config = TransformerConfig.from_config(config.model, data.tokenizer.vocab_size)
    state = create_train_state(config, model_config, jax.random.key(config.train.seed))
    state = state.replace(params=params)
    ckpts = checkpoints.Checkpoints(workdir, config.train.keep_checkpoints)
    try:
        ckpts.save(0, state, data.train.iterator,
                   {"step": 0, "vocab_size": data.tokenizer.vocab_size,
                    resume.MODEL_RECORD: resume.model_record(config),
                    "skipped_long_pairs": data.train.length_filter.skipped}, force=True)
    finally:
        ckpts.close()
