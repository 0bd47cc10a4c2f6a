"""Where sentence pairs come from: TFDS datasets read by random access (array_record).

Every source is a sequence of ``(source_text, target_text)`` pairs with ``len`` and integer
indexing, which is what grain needs for deterministic, resumable shuffling.

* ``builtin``: the project's generated corpus (``corpus.py``), registered here as the TFDS
  dataset ``builtin_corpus`` and written as array_record on first use (no TensorFlow needed).
* ``wmt14_ende`` / ``wmt14_enfr``: TFDS ``wmt14_translate/de-en`` and ``/fr-en``, read in the
  English -> German / French direction whatever TFDS's own pair order (which is de -> en).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import tensorflow_datasets as tfds

from transformer_jax.data import corpus

# dataset name -> (TFDS name, {split: TFDS split}); source/target language keys come from
# config.data.source_lang / target_lang.
TFDS_DATASETS: dict[str, tuple[str, dict[str, str]]] = {
    "builtin": ("builtin_corpus", {"train": "train", "validation": "validation",
                                   "test": "test"}),
    # newstest2013 is TFDS's validation split and newstest2014 its test split.
    "wmt14_ende": ("wmt14_translate/de-en", {"train": "train", "validation": "validation",
                                             "test": "test"}),
    "wmt14_enfr": ("wmt14_translate/fr-en", {"train": "train", "validation": "validation",
                                             "test": "test"}),
}


class BuiltinCorpus(tfds.core.GeneratorBasedBuilder):
    """The built-in English -> German-like corpus as a TFDS dataset."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release."}

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="A generated English -> German-like parallel corpus (see corpus.py).",
            features=tfds.features.FeaturesDict(
                {"en": tfds.features.Text(), "de": tfds.features.Text()}),
            supervised_keys=("en", "de"),
        )

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        splits = corpus.build_corpus(seed=0)
        return {name: self._generate_examples(pairs) for name, pairs in splits.items()}

    def _generate_examples(self, pairs: list[tuple[str, str]]):
        for i, (en, de) in enumerate(pairs):
            yield i, {"en": corpus.detokenize(en), "de": corpus.detokenize(de)}


class PairSource(Sequence):
    """Random access to (source, target) text pairs of a TFDS array_record split."""

    def __init__(self, records: Any, source_key: str, target_key: str, name: str):
        self.records = records
        self.source_key = source_key
        self.target_key = target_key
        self.name = name

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[str, str]:  # type: ignore[override]
        record = self.records[index]
        return _text(record[self.source_key]), _text(record[self.target_key])

    def __repr__(self) -> str:
        return f"PairSource({self.name}, {len(self)} pairs)"


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def data_dir_of(data_config: Any) -> str | None:
    return os.path.expanduser(data_config.data_dir) if data_config.data_dir else None


def prepare_builtin(data_dir: str | None) -> None:
    """Writes the built-in corpus as array_record if it is not there yet (a few seconds)."""
    builder = BuiltinCorpus(data_dir=data_dir, file_format="array_record")
    if builder.is_prepared():
        return
    tfds.disable_progress_bar()
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(verify_ssl=False))


def get_source(data_config: Any, split: str) -> PairSource:
    """The ``split`` ("train", "validation" or "test") of the configured dataset."""
    name = data_config.name
    if name not in TFDS_DATASETS:
        raise ValueError(f"data.name={name!r} has no TFDS source")
    tfds_name, splits = TFDS_DATASETS[name]
    data_dir = data_dir_of(data_config)
    if name == "builtin":
        prepare_builtin(data_dir)
    try:
        records = tfds.data_source(tfds_name, split=splits[split], data_dir=data_dir)
    except Exception as e:  # TFDS raises several types for a missing or tfrecord-only dataset
        raise FileNotFoundError(
            f"{tfds_name}: no array_record copy of split {split!r} under "
            f"{data_dir or '~/tensorflow_datasets'} ({type(e).__name__}); prepare it as the "
            "README's 'Preparing WMT14' section shows") from e
    return PairSource(records, data_config.source_lang, data_config.target_lang,
                      f"{tfds_name}:{split}")
