"""WMT14 English -> German: TFDS ``wmt14_translate/de-en``, read in the English -> German
direction (TFDS's own is de -> en). Its builder (tfds ``translate/wmt.py``) makes the splits:
train = Europarl v7 + Common Crawl + News Commentary v9, validation = newstest2013, test =
newstest2014."""

from transformer_jax import paper
from transformer_jax.config.datasets import Dataset

DATASET = Dataset(
    settings={"data.source_lang": "en", "data.target_lang": "de",
              "data.vocab_size": paper.VOCAB_SIZE_EN_DE},
    tfds_name="wmt14_translate/de-en", tfds_module="tensorflow_datasets.translate.wmt14",
    how_to_prepare=("prepare it: python -m transformer_jax.prepare wmt14_ende "
                    "(docs/data.md, 'Preparing WMT14')"))
