"""Stage 1: where sentence pairs come from, the readers of each kind of dataset source.

In: :class:`SourceSpec` (``data.name``, ``data.data_dir``, the languages, the text files)
and a split. Out: the split's pairs, which the vocabulary is trained on (``tokenizer.py``)
and which are tokenized (``tokens.py``, ``token_cache.py``).

Every source is a sequence of ``(source_text, target_text)`` pairs with ``len`` and integer
indexing, which is what grain needs for deterministic, resumable shuffling. The datasets are
data, in ``transformer_jax/config/datasets/`` (one module a dataset); each names the kind of
its source, read by the reader of that kind (``source_kinds/``, a registry; what the kinds
share is here):

* ``tfds``: a TFDS dataset prepared as array_record, read by random access. The paper's
  ``wmt14_ende`` / ``wmt14_enfr`` are TFDS ``wmt14_translate/de-en`` and ``/fr-en``
  (prepared as the README shows), read in the English -> German / French direction: TFDS
  stores each pair as ``{"de": ..., "en": ...}`` and its supervised order is de -> en; we
  read the ``data.source_lang`` and ``data.target_lang`` keys, so the order is ours.
* ``generated``: a TFDS builder whose data is generated here, written as array_record on
  first use (no TensorFlow needed), then read as ``tfds``: the built-in corpus
  (``corpus.py``), the TFDS dataset ``builtin_corpus``, and its long sentences
  (``long_corpus.py``), ``builtin_long_corpus``.
* ``text``: your own files (``text.py``), named by the config fields of the dataset's
  splits (``data.train_files`` / ``eval_files`` / ``test_files``).

Downloads (a TFDS builder's, such as WMT14's from statmt.org) verify TLS certificates
(:func:`download_config`); behind a proxy or mirror with its own certificate authority, name
its bundle in ``REQUESTS_CA_BUNDLE``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import pathlib
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

import tensorflow_datasets as tfds
from tensorflow_datasets.proto import tf_example_pb2

from transformer_jax.config import datasets
from transformer_jax.data import corpus, long_corpus, source_kinds, text
from transformer_jax.errors import ConfigError, DataError
from transformer_jax.io import locks, quiet, storage


def download_config() -> tfds.download.DownloadConfig:
    """How TFDS downloads what a builder prepares here: TLS certificates verified (against
    requests' CA bundle, or the one ``REQUESTS_CA_BUNDLE`` names), TFDS's checksums
    checked."""
    return tfds.download.DownloadConfig(verify_ssl=True)


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """What names a dataset's pairs: ``data.name``, ``data.data_dir`` ("": TFDS's default),
    the languages, and for text files the files of each split."""

    name: str
    data_dir: str = ""
    source_lang: str = "en"
    target_lang: str = "de"
    train_files: str = ""
    eval_files: str = ""
    test_files: str = ""

    @classmethod
    def from_config(cls, data: Any) -> SourceSpec:
        """The spec of a config's ``data`` section."""
        return cls(data.name, data.data_dir, data.source_lang, data.target_lang,
                   data.train_files, data.eval_files, data.test_files)


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


class BuiltinLongCorpus(BuiltinCorpus):
    """The built-in corpus with long, coordinated sentences (``long_corpus.py``): train and
    validation sources of at most L words, test sources spread up to 3L."""

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
        splits = long_corpus.build_long_corpus(seed=0)
        return {name: self._generate_examples(pairs) for name, pairs in splits.items()}


# The read-ahead of a sequential read (see RangeReads): a bucket serves it in a few large
# reads where random access costs one request a record.
READAHEAD_BYTES = 16 * 2**20


class RangeReads:
    """Reads of consecutive records of an array_record split, shard by shard, with read-ahead.

    Random access (TFDS's data source) reads each record on its own, which in a bucket is one
    request a record (docs/data.md has the two measured against each other). One reader is
    open at a time, so memory stays at one read-ahead buffer however many shards the split
    has. ``shards`` are TFDS's file instructions: (filename, first record, records) a
    shard."""

    def __init__(self, shards: Sequence[tuple[str, int, int]]):
        self.shards = list(shards)
        self._open: tuple[int, Any] | None = None  # (shard index, its reader)
        self._lock = threading.Lock()

    def read(self, start: int, stop: int) -> list[bytes]:
        """Records ``start`` (inclusive) to ``stop`` of the split, in order."""
        out: list[bytes] = []
        with self._lock:
            first = 0
            for i, (filename, skip, take) in enumerate(self.shards):
                lo, hi = max(start, first), min(stop, first + take)
                if lo < hi:
                    out.extend(self._reader(i, filename).read(skip + lo - first,
                                                              skip + hi - first))
                first += take
        return out

    def _reader(self, index: int, filename: str) -> Any:
        if self._open is None or self._open[0] != index:
            from array_record.python import array_record_module

            if self._open is not None:
                self._open[1].close()
            self._open = (index, array_record_module.ArrayRecordReader(
                filename, f"readahead_buffer_size:{READAHEAD_BYTES}"))
        return self._open[1]


class PairSource(Sequence):
    """Random access to (source, target) text pairs of a TFDS array_record split.

    ``records`` is a ``tfds.data_source`` opened with raw-bytes deserialization: each record
    is a serialized ``tf.train.Example`` whose ``source_key`` and ``target_key`` features
    hold the two sentences. Parsing the two strings ourselves costs a fraction of TFDS's
    generic decoding, and :meth:`read` fetches many records in one array_record call: for
    consecutive indices (a whole split tokenized for its cache) through ``ranges``, a
    sequential read with read-ahead.
    """

    def __init__(self, records: Any, source_key: str, target_key: str, name: str,
                 ranges: RangeReads | None = None):
        self.records = records
        self.source_key = source_key
        self.target_key = target_key
        self.name = name
        self.ranges = ranges
        self._batched = True
        if len(records):
            self._pair(records[0])  # names a missing language key now, not mid-run
            try:
                records.__getitems__([0])
            except TypeError:  # tfds.testing.mock_data's sources cannot read in batches
                self._batched = False

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> tuple[str, str]:  # type: ignore[override]
        return self._pair(self.records[int(index)])

    def read(self, indices: Sequence[int]) -> list[tuple[str, str]]:
        """The pairs at ``indices``, read in one batch."""
        indices = [int(i) for i in indices]
        if not self._batched:
            return [self[i] for i in indices]
        if (self.ranges is not None and len(indices) > 1
                and indices == list(range(indices[0], indices[-1] + 1))):
            return [self._pair(r) for r in self.ranges.read(indices[0], indices[-1] + 1)]
        return [self._pair(r) for r in self.records.__getitems__(indices)] if indices else []

    def _pair(self, record: bytes) -> tuple[str, str]:
        feature = tf_example_pb2.Example.FromString(record).features.feature
        if self.source_key not in feature or self.target_key not in feature:
            raise DataError(
                f"{self.name}: records have the fields {', '.join(sorted(feature))}, not "
                f"data.source_lang={self.source_key!r} and data.target_lang="
                f"{self.target_key!r}")
        return (feature[self.source_key].bytes_list.value[0].decode("utf-8"),
                feature[self.target_key].bytes_list.value[0].decode("utf-8"))

    def __repr__(self) -> str:
        return f"PairSource({self.name}, {len(self)} pairs)"


def data_dir_of(spec: SourceSpec) -> str | None:
    return os.fspath(storage.path(spec.data_dir)) if spec.data_dir else None


def prepare_builtin(data_dir: str | None) -> None:
    """Writes the built-in corpus as array_record if it is not there yet (a few seconds)."""
    prepare_generated(datasets.get("builtin").tfds_name, data_dir)


def prepare_generated(tfds_name: str, data_dir: str | None) -> None:
    """Writes the TFDS dataset ``tfds_name``, generated here by its builder (such as
    :class:`BuiltinCorpus`), as array_record if it is not there yet.

    Several processes may ask at once (the hosts of a multi-process run, the points of a
    sweep): its lock (``io/locks.py``, in the data_dir, local or a bucket) lets one write it
    while the others wait. TFDS cannot write array_record files to a bucket: for a ``gs://``
    data_dir the dataset is prepared in a local temporary directory and copied up.
    """
    builder = _generated_builder(tfds_name, data_dir)
    if _is_prepared(builder):
        return
    where = data_dir or os.path.expanduser("~/tensorflow_datasets")
    with locks.Lock(storage.path(where) / builder.name):
        builder = _generated_builder(tfds_name, data_dir)
        if _is_prepared(builder):
            return
        # Under the lock, what a killed preparation left is no one's.
        for unfinished in unfinished_preparations(tfds_name, data_dir):
            storage.rmtree(unfinished)
        tfds.disable_progress_bar()
        if not storage.is_remote(where):
            _prepare_in(tfds_name, where)
            return
        with tempfile.TemporaryDirectory() as tmp:
            _prepare_in(tfds_name, tmp)
            storage.copy_tree(pathlib.Path(tmp) / builder.name,
                              storage.path(where) / builder.name)


def _generated_builder(tfds_name: str, data_dir: str | None) -> tfds.core.DatasetBuilder:
    return tfds.builder(tfds_name, data_dir=data_dir, file_format="array_record")


# TFDS's warning when asked whether a dataset not yet written is prepared: its folder "has no
# dataset_info.json". Here the answer is expected, and the dataset is then written.
_NOT_YET_WRITTEN = "has no dataset_info.json"


def _is_prepared(builder: tfds.core.DatasetBuilder) -> bool:
    with quiet.Dropped(_NOT_YET_WRITTEN):
        return builder.is_prepared()


def _prepare_in(tfds_name: str, local_dir: str) -> None:
    """Writes the generated dataset under ``local_dir``. TFDS prints to stdout that it is
    "Downloading and preparing dataset Unknown size": nothing is downloaded, so this one line
    says what happens instead, on stderr with the rest of the log."""
    builder = _generated_builder(tfds_name, local_dir)
    logging.info("writing the generated dataset %s to %s (once)", builder.name, builder.data_dir)
    with contextlib.redirect_stdout(io.StringIO()):
        builder.download_and_prepare(download_config=download_config())


_TEXT_CACHE: dict[tuple, text.TextPairs] = {}


def cached_text(spec: str, field: str) -> text.TextPairs:
    """``text.load_pairs``, read again only when a file changes (size or modification time)."""
    paths = text.split_spec(spec, field)
    key = (spec, field, *((s.length, s.mtime) for s in (p.stat() for p in paths)))
    if key not in _TEXT_CACHE:
        if len(_TEXT_CACHE) >= 3:  # a run's train, eval and test splits
            _TEXT_CACHE.pop(next(iter(_TEXT_CACHE)))
        _TEXT_CACHE[key] = text.load_pairs(spec, field)
    return _TEXT_CACHE[key]


Source = PairSource | text.TextPairs


def unfinished_preparations(tfds_name: str, data_dir: str | None) -> list[str]:
    """The folders of preparations of TFDS dataset ``tfds_name`` that did not finish: TFDS's
    ``incomplete.*`` folders, next to where its version folder goes (a killed preparation
    leaves one)."""
    where = storage.path(data_dir or os.path.expanduser("~/tensorflow_datasets"))
    where = where.joinpath(*tfds_name.split("/"))
    if not where.is_dir():
        return []
    return sorted(os.fspath(p) for p in where.iterdir()
                  if p.name.startswith(tfds.core.constants.INCOMPLETE_PREFIX))


def get_source(spec: SourceSpec | Any, split: str) -> Source:
    """The ``split`` ("train", "validation" or "test") of the dataset ``spec.name``, read by
    the reader of its kind of source. ``spec`` may be a config's ``data`` section, read into
    a :class:`SourceSpec` first (the commands that read one split)."""
    if not isinstance(spec, SourceSpec):
        spec = SourceSpec.from_config(spec)
    dataset = datasets.get(spec.name)
    if dataset.source not in source_kinds.REGISTRY:
        raise ConfigError(f"data.name={spec.name!r}: its source {dataset.source!r} has "
                          f"no reader; the kinds are {', '.join(source_kinds.names())}")
    if split not in dataset.splits:
        raise ValueError(f"split {split!r} is not one of {', '.join(dataset.splits)}")
    return source_kinds.get(dataset.source).read(dataset, spec, split)
