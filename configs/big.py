"""Transformer (big) on WMT14 English-German.

    python -m transformer_jax.main --config=configs/big.py --workdir=runs/big

6 layers, d_model 1024, d_ff 4096, 16 heads, P_drop 0.3, 300K steps, the last 20 checkpoints
kept for averaging. Paper: newstest2014 BLEU 28.4 (Table 2), newstest2013 PPL 4.33 and BLEU
26.4 (Table 3).
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "big")
