"""Every row of Table 3 of the paper as a named variant, on WMT14 English-German.

    python -m transformer_jax.main --config=configs/table3.py:A_h16 --workdir=runs/A_h16
    python -m configs.table3     # lists the variants: each one's Table 3 row and overrides

The variants are the entries of transformer_jax/config/variants.py's VARIANTS (dotted
overrides of the base config): the base model, each row's variants (A: heads with
h * d_k = 512, B: key size, C: layers, d_model, d_ff, D: dropout and label smoothing, E:
learned positions) and big. The paper's dev-set (newstest2013) PPL and BLEU for each row are
in transformer_jax/paper.py.
Any variant trains on the built-in corpus with ``:VARIANT,dataset=builtin`` or with
``--config.data.name=builtin``, at the CPU demo's size with ``:VARIANT,scale=demo``.
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "base")


if __name__ == "__main__":
    for name, variant in config_lib.VARIANTS.items():
        overrides = ", ".join(f"{k}={v!r}" for k, v in variant.overrides.items())
        print(f"{name:10} {variant.row or '-':2} {overrides}".rstrip())
