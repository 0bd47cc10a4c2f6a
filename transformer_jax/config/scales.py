"""The sizes at which any variant trains: the paper's and the CPU demo's, as data."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Scale:
    """A size at which every variant trains.

    ``base`` gives the base model's values at this scale of the fields that scale: each
    variant's value of such a field is multiplied by the base model's ratio (d_k and d_v
    scale with d_model; the number of heads never scales). ``overrides`` are the data,
    batch, schedule and evaluation settings of the scale; ``sweep`` what a sweep's points
    add at this scale (end-of-run BLEU), and ``dataset`` the dataset they train on ("": the
    experiment's config file's).
    """

    base: Mapping[str, int]
    overrides: Mapping[str, Any]
    sweep: Mapping[str, Any]
    dataset: str = ""


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
        {"train.bleu_sentences": 300, "train.samples": 0, "decode.strategy": "greedy"},
        dataset="builtin"),
}
