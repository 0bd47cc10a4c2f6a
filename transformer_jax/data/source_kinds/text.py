"""Your own files (``data/text.py``), named by the config fields of the dataset's splits
(``data.train_files`` / ``eval_files`` / ``test_files``)."""

from __future__ import annotations

from transformer_jax.config import datasets
from transformer_jax.data import sources
from transformer_jax.data.source_kinds import Traits
from transformer_jax.data.text import TextPairs

TRAITS = Traits(prepared=False)


def read(dataset: datasets.Dataset, spec: sources.SourceSpec, split: str) -> TextPairs:
    """A split of text files: those named by the config field of the dataset's split."""
    field = dataset.splits[split]  # "data.train_files"
    return sources.cached_text(getattr(spec, field.split(".", 1)[1]), field)
