"""A new run that starts from given parameters (an imported model): checkpoint 0 of its
workdir, holding those parameters, a fresh optimizer state and the data at its start, which
training resumes like any other checkpoint."""

from __future__ import annotations

from typing import Any

import jax

from transformer_jax.config import resume
from transformer_jax.data import pipeline
from transformer_jax.io import checkpoints, storage
from transformer_jax.training import parallel
from transformer_jax.training.spec import TrainingSpec
from transformer_jax.training.step import initial_state


def save_initial(spec: TrainingSpec, workdir: storage.PathLike, params: Any) -> None:
    """Writes checkpoint 0 of ``workdir`` (which holds the run's vocabulary) with
    ``params``, as ``Run`` would save it at step 0 of a new run."""
    data = pipeline.data_of(spec.data, workdir, len(parallel.local_devices(spec.loop.devices)))
    model_config = spec.with_vocab(data.tokenizer.vocab_size).model
    state = initial_state(spec.optim, model_config, jax.random.key(spec.loop.seed))
    state = state.replace(params=params)
    ckpts = checkpoints.Checkpoints(workdir, spec.checkpoints.keep)
    try:
        ckpts.save(0, state, data.train.iterator,
                   {"step": 0, "vocab_size": data.tokenizer.vocab_size,
                    resume.MODEL_RECORD: spec.recorded_model,
                    "skipped_long_pairs": data.train.length_filter.skipped}, force=True)
    finally:
        ckpts.close()
