"""WMT14 English -> French: TFDS ``wmt14_translate/fr-en`` (train adds UN and Gigaword FR-EN to
EN-DE's sources; validation newstest2013, test newstest2014)."""

from transformer_jax import paper
from transformer_jax.config.datasets import Dataset

DATASET = Dataset(
    settings={"data.source_lang": "en", "data.target_lang": "fr",
              "data.vocab_size": paper.VOCAB_SIZE_EN_FR},
    tfds_name="wmt14_translate/fr-en", tfds_module="tensorflow_datasets.translate.wmt14",
    how_to_prepare=("prepare it: python -m transformer_jax.prepare wmt14_enfr "
                    "(docs/data.md, 'Preparing WMT14')"))
