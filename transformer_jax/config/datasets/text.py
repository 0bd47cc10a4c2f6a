"""Your own files (``data/text.py``): each split in the config field that names its files;
the languages and vocabulary size are yours to set. Its rows are sized to your sentences."""

from transformer_jax.config.datasets import Dataset

DATASET = Dataset(
    source="text", rows_from_data=True,
    splits={"train": "data.train_files", "validation": "data.eval_files",
            "test": "data.test_files"})
