"""WMT14 English -> German, the paper's main task: any variant of Table 3, base or big.

    python -m transformer_jax.main --config=configs/wmt14_ende.py --workdir=runs/ende_base
    python -m transformer_jax.main --config=configs/wmt14_ende.py:big --workdir=runs/ende_big
    python -m transformer_jax.main --config=configs/wmt14_ende.py:C_N2 --workdir=runs/ende_C_N2

Data: TFDS ``wmt14_translate/de-en`` prepared as array_record (README, "Preparing WMT14"),
about 4.5M pairs read English -> German (TFDS's own pair order is de -> en); validation
newstest2013, test newstest2014. One shared SentencePiece BPE vocabulary of 37,000 pieces
trained on 10M characters per side; ~25,000 source + ~25,000 target tokens per step as packed
rows of 256 slots. Variants are those of configs/table3.py (config.VARIANTS): base, A_h1 ...
E_learned, big. Paper: base 27.3 / big 28.4 BLEU on newstest2014 (Table 2), base 25.8 BLEU
and 4.92 PPL on newstest2013 (Table 3).
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "base", default_dataset="wmt14_ende")
