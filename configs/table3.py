"""Every row of Table 3 of the paper as a named variant, on WMT14 English-German.

    python -m transformer_jax.main --config=configs/table3.py:A_h16 --workdir=runs/A_h16

Variants: base, A_h1, A_h4, A_h16, A_h32 (heads, h * d_k = 512), B_dk16, B_dk32 (key size),
C_N2, C_N4, C_N8 (layers), C_d256, C_d1024 (d_model), C_ff1024, C_ff4096 (d_ff), D_drop0,
D_drop02 (dropout), D_ls0, D_ls02 (label smoothing), E_learned (learned positions), big.
Each is an entry of transformer_jax/config.py's VARIANTS (dotted overrides of the base
config); tests/test_config.py checks this list against it. The paper's dev-set
(newstest2013) PPL and BLEU for each row are in transformer_jax/paper.py.
Any variant trains on the built-in corpus with ``:VARIANT,dataset=builtin`` or with
``--config.data.name=builtin``, at the CPU demo's size with ``:VARIANT,scale=demo``.
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "base")
