"""A TFDS dataset prepared as array_record, read by random access (the paper's WMT14)."""

from __future__ import annotations

import importlib
import os

import tensorflow_datasets as tfds

from transformer_jax.config import datasets
from transformer_jax.data.source_kinds import Traits
from transformer_jax.data.sources import (
    PairSource,
    RangeReads,
    SourceSpec,
    data_dir_of,
    unfinished_preparations,
)

TRAITS = Traits(prepared=True)


def read(dataset: datasets.Dataset, spec: SourceSpec, split: str) -> PairSource:
    """A split of a TFDS dataset prepared as array_record under data.data_dir."""
    if dataset.tfds_module:
        # tfds imports its dataset modules lazily; importing this one registers the builder
        # (wmt14_translate needs no TensorFlow to read a prepared copy).
        importlib.import_module(dataset.tfds_module)
    data_dir = data_dir_of(spec)
    try:
        # download=False: preparing a TFDS dataset is a separate step; never start it here.
        records = tfds.data_source(dataset.tfds_name, split=dataset.splits[split],
                                   data_dir=data_dir, download=False,
                                   deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
    except Exception as e:  # TFDS raises several types for a missing or tfrecord-only dataset
        unfinished = unfinished_preparations(dataset.tfds_name, data_dir)
        raise FileNotFoundError(
            f"{dataset.tfds_name}: no array_record copy of split {split!r} under "
            f"{data_dir or '~/tensorflow_datasets'} ({type(e).__name__}"
            + (f"; a preparation did not finish: {unfinished[-1]}" if unfinished else "")
            + f"); {dataset.how_to_prepare}") from e
    try:
        ranges = RangeReads([(os.fspath(f.filename), f.skip, f.take) for f in
                             records.dataset_info.splits[dataset.splits[split]].file_instructions])
    except KeyError:  # tfds.testing.mock_data's sources have no files: random access alone
        ranges = None
    return PairSource(records, spec.source_lang, spec.target_lang,
                      f"{dataset.tfds_name}:{split}", ranges)
