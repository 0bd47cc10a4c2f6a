"""A TFDS builder whose data is generated here (the built-in corpora, ``data/corpus.py`` and
``data/long_corpus.py``), written as array_record on first use (no TensorFlow needed), then
read as ``tfds``."""

from __future__ import annotations

from transformer_jax.config import datasets
from transformer_jax.data.source_kinds import Traits, tfds
from transformer_jax.data.sources import PairSource, SourceSpec, data_dir_of, prepare_generated

TRAITS = Traits(prepared=False)


def read(dataset: datasets.Dataset, spec: SourceSpec, split: str) -> PairSource:
    """A split of a dataset generated here: prepared on first use, then read as TFDS."""
    prepare_generated(dataset.tfds_name, data_dir_of(spec))
    return tfds.read(dataset, spec, split)
