"""Where sentence pairs come from: TFDS datasets read by random access, or text files.

Every source is a sequence of ``(source_text, target_text)`` pairs with ``len`` and integer
indexing, which is what grain needs for deterministic, resumable shuffling.

* ``builtin``: the project's generated corpus (``corpus.py``), registered here as the TFDS
  dataset ``builtin_corpus`` and written as array_record on first use (no TensorFlow needed).
* ``wmt14_ende`` / ``wmt14_enfr``: TFDS ``wmt14_translate/de-en`` and ``/fr-en`` (prepared
  as array_record, see the README), read in the English -> German / French direction. TFDS
  stores each pair as ``{"de": ..., "en": ...}`` and its supervised order is de -> en; we
  read the ``data.source_lang`` and ``data.target_lang`` keys, so the order is ours.
  Its builder (tfds ``translate/wmt.py``) makes the splits: train = Europarl v7 + Common Crawl
  + News Commentary v9 (EN-FR adds UN and Gigaword FR-EN), validation = newstest2013, test =
  newstest2014.
* ``text``: your own files (``text.py``), ``data.train_files`` / ``eval_files`` /
  ``test_files``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import tempfile
from collections.abc import Sequence
from typing import Any

import tensorflow_datasets as tfds
from tensorflow_datasets.proto import tf_example_pb2

from transformer_jax.data import corpus, text
from transformer_jax.errors import DataError
from transformer_jax.io import storage

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
    """Random access to (source, target) text pairs of a TFDS array_record split.

    ``records`` is a ``tfds.data_source`` opened with raw-bytes deserialization: each record
    is a serialized ``tf.train.Example`` whose ``source_key`` and ``target_key`` features
    hold the two sentences. Parsing the two strings ourselves costs a fraction of TFDS's
    generic decoding, and :meth:`read` fetches many records in one array_record call.
    """

    def __init__(self, records: Any, source_key: str, target_key: str, name: str):
        self.records = records
        self.source_key = source_key
        self.target_key = target_key
        self.name = name
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


def data_dir_of(data_config: Any) -> str | None:
    return os.fspath(storage.path(data_config.data_dir)) if data_config.data_dir else None


def prepare_builtin(data_dir: str | None) -> None:
    """Writes the built-in corpus as array_record if it is not there yet (a few seconds).

    Several processes may ask at once (the hosts of a multi-process run, the points of a
    sweep): a lock file lets one write it while the others wait. TFDS cannot write
    array_record files to a bucket: for a ``gs://`` data_dir the corpus is prepared in a
    local temporary directory and copied up.
    """
    builder = BuiltinCorpus(data_dir=data_dir, file_format="array_record")
    if builder.is_prepared():
        return
    # The lock is a local file (a bucket has no locks): it keeps apart the processes of one
    # machine, such as the points of a sweep launched locally.
    where = data_dir or os.path.expanduser("~/tensorflow_datasets")
    lock_dir = (storage.local(where) or pathlib.Path(tempfile.gettempdir()) / (
        "transformer_jax-" + hashlib.sha1(where.encode()).hexdigest()[:12]))
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / ".builtin_corpus.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        builder = BuiltinCorpus(data_dir=data_dir, file_format="array_record")
        if builder.is_prepared():
            return
        tfds.disable_progress_bar()
        if not storage.is_remote(where):
            _prepare_builtin_in(where)
            return
        with tempfile.TemporaryDirectory() as tmp:
            _prepare_builtin_in(tmp)
            storage.copy_tree(pathlib.Path(tmp) / builder.name,
                              storage.path(where) / builder.name)


def _prepare_builtin_in(local_dir: str) -> None:
    BuiltinCorpus(data_dir=local_dir, file_format="array_record").download_and_prepare(
        download_config=tfds.download.DownloadConfig(verify_ssl=False))


TEXT_FIELDS = {"train": "train_files", "validation": "eval_files", "test": "test_files"}
_TEXT_CACHE: dict[tuple, text.TextPairs] = {}


def _cached_text(spec: str, field: str) -> text.TextPairs:
    """``text.load_pairs``, read again only when a file changes (size or modification time)."""
    paths = text.split_spec(spec, field)
    key = (spec, field, *((s.length, s.mtime) for s in (p.stat() for p in paths)))
    if key not in _TEXT_CACHE:
        if len(_TEXT_CACHE) >= 3:  # a run's train, eval and test splits
            _TEXT_CACHE.pop(next(iter(_TEXT_CACHE)))
        _TEXT_CACHE[key] = text.load_pairs(spec, field)
    return _TEXT_CACHE[key]


def get_source(data_config: Any, split: str) -> PairSource | text.TextPairs:
    """The ``split`` ("train", "validation" or "test") of the configured dataset."""
    name = data_config.name
    if name == "text":
        field = TEXT_FIELDS[split]
        return _cached_text(data_config[field], f"data.{field}")
    if name not in TFDS_DATASETS:
        raise ValueError(f"data.name={name!r} has no source")
    tfds_name, splits = TFDS_DATASETS[name]
    data_dir = data_dir_of(data_config)
    if name == "builtin":
        prepare_builtin(data_dir)
    else:
        # tfds imports its dataset modules lazily; importing this one registers
        # wmt14_translate (it needs no TensorFlow to read a prepared copy).
        import tensorflow_datasets.translate.wmt14  # noqa: F401
    try:
        # download=False: preparing WMT is a separate step (README); never start it here.
        records = tfds.data_source(tfds_name, split=splits[split], data_dir=data_dir,
                                   download=False,
                                   deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)
    except Exception as e:  # TFDS raises several types for a missing or tfrecord-only dataset
        raise FileNotFoundError(
            f"{tfds_name}: no array_record copy of split {split!r} under "
            f"{data_dir or '~/tensorflow_datasets'} ({type(e).__name__}); prepare it as the "
            "README's 'Preparing WMT14' section shows") from e
    return PairSource(records, data_config.source_lang, data_config.target_lang,
                      f"{tfds_name}:{split}")
