"""A trained run's checkpoints measured with dropout off and on, on validation and training
pairs: where a model's validation perplexity rises while its training loss falls, is it
fitting the training pairs (overfitting) or learning what only works with dropout's noise?

    python experiments/dropout_gap.py --workdir=runs/big_factors/big,seed=0 [--pairs=1000]
        [--masks=4] [--steps=450,900,1350]

For each checkpoint kept in the workdir (or each of ``--steps``), the NLL per target token
(unsmoothed) of the first ``--pairs`` pairs of the validation split and of the training
split (the pairs the run trained on, in the split's own order), each:

* with dropout off, as validation perplexity is measured (``deterministic``);
* with the run's own dropout on (model.dropout_rate, as in a train step), averaged over
  ``--masks`` draws of the masks.

Overfitting shows as training NLL far below validation NLL with dropout off; a model that
leans on dropout shows as NLL *lower with dropout on than off* on the same pairs (turning
dropout off at evaluation should only help a model that is not). Prints a table and ends
with one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformer_jax.config import resume  # noqa: E402
from transformer_jax.data import batching, pipeline, sources, tokens  # noqa: E402
from transformer_jax.data.tokenizer import Tokenizer  # noqa: E402
from transformer_jax.evaluation.perplexity import loss_over_batches  # noqa: E402
from transformer_jax.io import checkpoints, layout  # noqa: E402
from transformer_jax.model import counts, losses  # noqa: E402
from transformer_jax.model.spec import TransformerConfig  # noqa: E402
from transformer_jax.model.transformer import Transformer  # noqa: E402


@functools.partial(jax.jit, static_argnames="config")
def _sums(params, batch, key, *, config):
    """Summed NLL of a batch; with dropout when ``config.deterministic`` is False."""
    model = Transformer(config)
    weights = (batch["targets_segment_ids"] > 0).astype(np.float32)
    logits = model.apply({"params": params}, **losses.model_inputs(batch),
                         rngs={"dropout": key})
    loss_sum, nll_sum = losses.label_smoothed_cross_entropy(logits, batch["targets"], weights,
                                                            0.0)
    return {"loss_sum": loss_sum, "nll_sum": nll_sum, "tokens": weights.sum()}


def nll(params, config, batches, key=None):
    """NLL per target token over ``batches``; with dropout (mask ``key``) when given."""
    cfg = config.replace(deterministic=key is None, decode=False)
    key = jax.random.key(0) if key is None else key
    return loss_over_batches(lambda b: _sums(params, b, key, config=cfg), batches)["nll"]


def measure(workdir: str, pairs: int, masks: int, steps: list[int]) -> list[dict]:
    config = resume.workdir_config(workdir)
    spec = pipeline.DataSpec.from_config(config)
    tokenizer = Tokenizer(Path(workdir) / layout.VOCAB / layout.VOCAB_MODEL)
    rows = batching.rows_per_batch(spec.batch.tokens_per_batch, spec.batch.max_len, 1)
    batches = {}  # the same pairs for every checkpoint
    for split in ("validation", "train"):
        source = sources.get_source(spec.source, split)
        ids = tokens.Head(pipeline.split_ids(spec, workdir, split, tokenizer, source),
                          min(pairs, len(source)))
        batches[split] = list(batching.eval_batches(ids, None, max_len=spec.batch.max_len,
                                                    rows=rows))
    model_config = TransformerConfig.from_config(config.model, tokenizer.vocab_size)
    shapes = counts.param_shapes(model_config)
    ckpts = checkpoints.Checkpoints(workdir, config.train.keep_checkpoints)
    out = []
    try:
        kept = ckpts.all_steps()
        for step in steps or kept:
            if step not in kept:
                raise SystemExit(f"error: {workdir} keeps no checkpoint of step {step} "
                                 f"(it keeps {', '.join(map(str, kept))})")
            params = ckpts.restore_params(step, shapes)
            row = {"step": step}
            for split, split_batches in batches.items():
                row[f"{split}_off"] = nll(params, model_config, split_batches)
                row[f"{split}_on"] = float(np.mean([
                    nll(params, model_config, split_batches, jax.random.key(1000 + i))
                    for i in range(masks)]))
            out.append(row)
            print(f"step {step:5d} | validation NLL off {row['validation_off']:.3f} "
                  f"on {row['validation_on']:.3f} (PPL {math.exp(row['validation_off']):.2f}) "
                  f"| train NLL off {row['train_off']:.3f} on {row['train_on']:.3f}",
                  flush=True)
    finally:
        ckpts.close()
    return out


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _steps(text: str) -> list[int]:
    return [_positive(s) for s in text.split(",") if s.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--pairs", type=_positive, default=1000)
    parser.add_argument("--masks", type=_positive, default=4)
    parser.add_argument("--steps", type=_steps, default=[],
                        help="comma-separated; default: every kept one")
    args = parser.parse_args()
    if not (Path(args.workdir) / layout.CONFIG).is_file():
        parser.error(f"--workdir={args.workdir}: no {layout.CONFIG} there (not a trained run)")
    rows = measure(args.workdir, args.pairs, args.masks, args.steps)
    print(json.dumps({"workdir": args.workdir, "pairs": args.pairs, "masks": args.masks,
                      "checkpoints": rows}))


if __name__ == "__main__":
    main()
