"""WMT14 English -> French: base or big (or any Table 3 variant).

    python -m transformer_jax.main --config=configs/wmt14_enfr.py:big --workdir=runs/enfr_big

Data: TFDS ``wmt14_translate/fr-en`` prepared as array_record (README, "Preparing WMT14"),
about 40.8M pairs read English -> French; validation newstest2013, test newstest2014.
A shared 32,000-piece vocabulary (the paper used word pieces; this is SentencePiece BPE,
like EN-DE). The big model uses P_drop 0.1 here, as in the paper. Paper: base 38.1 / big 41.8
BLEU on newstest2014 (Table 2).
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    return config_lib.from_arg(arg, "base", default_dataset="wmt14_enfr")
