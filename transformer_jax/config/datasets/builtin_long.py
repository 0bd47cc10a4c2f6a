"""The built-in corpus for length generalisation (``data/long_corpus.py``): train and
validation pairs whose sources have at most L = 16 words, test pairs spread evenly over
1-16, 17-24, 25-32, 33-40 and 41-48 words (up to 3L), written as array_record on first use.
experiments/extrapolation.py trains on it."""

from transformer_jax import paper
from transformer_jax.config.datasets import Dataset

DATASET = Dataset(
    settings={"data.source_lang": "en", "data.target_lang": "de",
              "data.vocab_size": paper.VOCAB_SIZE_EN_DE},
    source="generated", tfds_name="builtin_long_corpus", rows_from_data=True)
