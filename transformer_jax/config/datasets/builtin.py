"""The project's generated English -> German-like corpus (``data/corpus.py``): a TFDS builder
of ``data/sources.py`` written as array_record on first use. Its rows are sized to its short
sentences."""

from transformer_jax import paper
from transformer_jax.config.datasets import Dataset

DATASET = Dataset(
    settings={"data.source_lang": "en", "data.target_lang": "de",
              "data.vocab_size": paper.VOCAB_SIZE_EN_DE},
    source="generated", tfds_name="builtin_corpus", rows_from_data=True)
