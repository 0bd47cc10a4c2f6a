"""Transformer (base) on WMT14 English-German: the paper's model and training recipe.

    python -m transformer_jax.main --config=configs/base.py --workdir=runs/base

6 layers, d_model 512, d_ff 2048, 8 heads, P_drop 0.1, label smoothing 0.1, Adam with 4000
warmup steps, 100K steps of ~25,000 source + 25,000 target tokens, the last 5 checkpoints
kept for averaging. Paper: newstest2014 BLEU 27.3 (Table 2), newstest2013 PPL 4.92 and BLEU
25.8 (Table 3). Append ``:base,dataset=builtin`` to train it on the built-in corpus instead.
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "base")
