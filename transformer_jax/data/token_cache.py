"""Stage 2, cached: each split's token ids, tokenized once for every run that shares its
vocabulary and data, and read by all of them.

In: a split's pairs and the vocabulary. Out: ``CachedIds``, the same ids as tokenizing on the
fly (``tokens.TokenizedPairs``), so the batches are the same whichever is read.

Tokenizing a pair with SentencePiece costs far more than reading, packing and batching it.
The first run that needs a split's ids writes them as array_record: record 0 a JSON header,
record k + 1 pair k's source and target ids (a little-endian uint32 source length, then the
source ids and the target ids, uint16 for a vocabulary of at most 65,536 pieces, int32
beyond). One record a group and no compression, so a random read of a pair is one read.

Where: ``io/layout.token_cache_dir`` (``data.token_cache_dir`` when set; the sweep root's
``tokens/`` for the points of a sweep, which share their vocabulary; otherwise the
workdir's ``vocab/tokens/``), on a local disk or in a bucket. The file is keyed by what
determines the ids (:func:`cache_key`): the SentencePiece model's bytes, the split (a TFDS
dataset's name, version, split and languages; the text of every pair of text files), the
languages, the end-of-sentence id and this format. The key names the file and is checked
against its header, so another vocabulary or other data never reads it.

Once: the first process to need it takes its lock (``io/locks.py``) and writes it; every
other process, of the same run or of another, waits for the lock, saying in one line what it
waits for, then reads the file. A process that waits longer than ``data.token_cache_wait_s``
tokenizes on the fly instead (same batches). The file is written under a temporary name and
renamed (in a bucket: written locally, then uploaded as one object), so a killed writer leaves
nothing that is read, and its lock goes with it; a damaged or mismatched file is rebuilt with
one warning line.

A cache in a bucket is checked there, then read from a copy on each host's disk
(:func:`local_copy`, under ``$TRANSFORMER_JAX_CACHE/tokens``, default
``~/.cache/transformer_jax/tokens``, named by its key), copied once a host in one streamed
read: training reads pairs at random, which in a bucket would be one request a pair. Where
the copy cannot be made (too little disk, no write access) the bucket is read, said in one
line. Without a cache (``data.token_cache=False``, or a location that cannot be
written) pairs are tokenized on the fly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import hashlib
import json
import logging
import os
import pathlib
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from array_record.python import array_record_data_source, array_record_module

from transformer_jax.data import text
from transformer_jax.data.tokenizer import Tokenizer
from transformer_jax.data.tokens import ADD_EOS, Ids, Ragged, TokenizedPairs
from transformer_jax.errors import DataError
from transformer_jax.io import layout, locks, storage, strict_json

FORMAT = 1  # of the records; a new format is a new key
WRITER_OPTIONS = "group_size:1,uncompressed"  # one record a group: a random read is one read
WRITE_CHUNK_PAIRS = 4096  # pairs tokenized together when the cache is written
HEADER_BYTES = 4  # the source length at the start of each record (little-endian uint32)


@dataclasses.dataclass(frozen=True)
class CacheSpec:
    """How a run gets its splits' ids (``data.token_cache``, ``data.token_cache_dir``,
    ``data.token_cache_wait_s``): from caches in ``directory`` ("": the default of
    ``layout.token_cache_dir``), waiting at most ``wait_s`` seconds for another process
    that writes one; on the fly when not ``enabled``. The languages are part of the key."""

    enabled: bool = True
    directory: str = ""
    wait_s: float = 3600.0
    source_lang: str = "en"
    target_lang: str = "de"


class CachedIds:
    """The ids of a split read from its token cache at ``path``, checked against ``key``.

    Raises DataError naming the file for one that is not a whole cache of that key.
    """

    def __init__(self, path: storage.PathLike, key: str, name: str = ""):
        self.path = os.fspath(path)
        self.name = name or self.path
        self.key = key
        try:
            self.records = array_record_data_source.ArrayRecordDataSource([self.path])
            first = self.records[0]
        except Exception as e:  # noqa: BLE001  array_record raises several types for a bad file
            raise DataError(f"{self.path}: damaged token cache ({type(e).__name__})") from None
        try:
            header = strict_json.loads(first, f"{self.path}: the header")
        except strict_json.Damaged as e:
            raise DataError(f"damaged token cache: {e}") from None
        if header.get("key") != key:
            raise DataError(f"{self.path}: a token cache of other ids (another vocabulary or "
                            "other data)")
        if header.get("pairs") != len(self.records) - 1:
            raise DataError(f"{self.path}: damaged token cache: {len(self.records) - 1} "
                            f"records for the {header.get('pairs')} pairs its header names")
        try:
            self.dtype = np.dtype(str(header.get("dtype")))
        except TypeError:
            self.dtype = np.dtype("f")  # refused below
        if self.dtype.kind not in "ui":
            raise DataError(f"{self.path}: damaged token cache: dtype="
                            f"{str(header.get('dtype'))[:20]!r} is not a type of ids")

    def __len__(self) -> int:
        return len(self.records) - 1

    def read_ids(self, indices: Sequence[int]) -> tuple[Ragged, Ragged]:
        keys = (np.asarray(indices, np.int64) + 1).tolist()
        records = self.records.__getitems__(keys) if keys else []
        return decode(records, self.dtype, self.path)

    def __repr__(self) -> str:
        return f"CachedIds({self.name}, {len(self)} pairs)"


def encode_records(inputs: Ragged, targets: Ragged, dtype: np.dtype) -> Iterator[bytes]:
    """The records of pairs: a uint32 source length, the source ids, the target ids."""
    header = inputs.lengths.astype("<u4")
    src, tgt = inputs.values.astype(dtype).tobytes(), targets.values.astype(dtype).tobytes()
    size = dtype.itemsize
    src_at, tgt_at = inputs.starts * size, targets.starts * size
    for k in range(len(inputs)):
        yield (header[k].tobytes() + src[src_at[k]:src_at[k] + inputs.lengths[k] * size]
               + tgt[tgt_at[k]:tgt_at[k] + targets.lengths[k] * size])


def decode(records: Sequence[bytes], dtype: np.dtype, where: str = "token cache"
           ) -> tuple[Ragged, Ragged]:
    """Source and target ids of :func:`encode_records`' records, in one go."""
    nbytes = np.fromiter(map(len, records), np.int64, len(records))
    data = np.frombuffer(b"".join(records), np.uint8)
    starts = np.cumsum(nbytes) - nbytes
    header = data[starts[:, None] + np.arange(HEADER_BYTES)]
    src_len = np.ascontiguousarray(header).view("<u4")[:, 0].astype(np.int64)
    body = nbytes - HEADER_BYTES
    ids_len = body // dtype.itemsize
    if np.any(body < 0) or np.any(body % dtype.itemsize) or np.any(src_len > ids_len):
        raise DataError(f"{where}: damaged token cache (a record does not hold the lengths "
                        "it names)")
    keep = np.ones(len(data), bool)
    keep[(starts[:, None] + np.arange(HEADER_BYTES)).ravel()] = False
    ids = data[keep].view(dtype).astype(np.int32)
    position = np.arange(len(ids)) - np.repeat(np.cumsum(ids_len) - ids_len, ids_len)
    is_source = position < np.repeat(src_len, ids_len)
    return (Ragged(ids[is_source], src_len), Ragged(ids[~is_source], ids_len - src_len))


def split_identity(source: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """What identifies the pairs of a split: a TFDS split by its dataset, version, split and
    language keys (a version's data does not change); any other source (text files) by the
    text of all its pairs."""
    records = getattr(source, "records", None)
    info = getattr(records, "dataset_info", None)
    if info is not None:
        return {"tfds": info.full_name, "split": str(records.split), "pairs": len(source),
                "keys": [source.source_key, source.target_key]}  # type: ignore[attr-defined]
    digest = hashlib.sha256()
    pairs = source.pairs if isinstance(source, text.TextPairs) else source
    for start in range(0, len(pairs), 100_000):
        digest.update("".join(f"{a}\t{b}\n" for a, b in
                              (pairs[i] for i in range(start, min(start + 100_000,
                                                                  len(pairs))))).encode())
    return {"pairs": len(source), "sha256": digest.hexdigest()}


def cache_key(tokenizer: Tokenizer, source: Sequence[tuple[str, str]],
              source_lang: str, target_lang: str) -> str:
    """The hash of what determines the ids of ``source`` (see the module docstring)."""
    identity = {"format": FORMAT, "add_eos": ADD_EOS, "source_lang": source_lang,
                "target_lang": target_lang, "split": split_identity(source),
                "vocab": hashlib.sha256(tokenizer.sp.serialized_model_proto()).hexdigest()}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def cache_path(directory: storage.PathLike, split: str, key: str) -> storage.Path:
    """The token cache of ``split`` for ``key`` in the cache folder ``directory``
    (``layout.token_cache_dir``)."""
    return storage.path(directory) / layout.TOKEN_CACHE_FILE.format(
        split=split, key=key[:layout.TOKEN_CACHE_KEY_CHARS])


def path_partials(path: str) -> str:
    """The pattern of the temporary names that the local file ``path`` is written under."""
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.*.partial")


def _write_records(path: str, ids: Ids, key: str, dtype: np.dtype, chunk_pairs: int) -> None:
    """Tokenizes every pair of ``ids`` into the new local file ``path``."""
    writer = array_record_module.ArrayRecordWriter(path, WRITER_OPTIONS)
    if not writer.ok():
        raise OSError(f"cannot write {path}")
    writer.write(json.dumps({"key": key, "pairs": len(ids), "dtype": dtype.str,
                             "format": FORMAT, "split": ids.name}).encode())
    try:
        for start in range(0, len(ids), chunk_pairs):
            inputs, targets = ids.read_ids(range(start, min(start + chunk_pairs, len(ids))))
            for record in encode_records(inputs, targets, dtype):
                writer.write(record)
        if not writer.ok():
            raise RuntimeError("the writer failed (is the disk full?)")
        writer.close()
    except RuntimeError as e:  # array_record's error for a failed write: an OSError here
        full = "No space left on device" in str(e)
        raise OSError(errno.ENOSPC if full else errno.EIO,
                      "no space left on device" if full else str(e).split(";")[0]) from None


def write(path: storage.PathLike, ids: Ids, key: str, vocab_size: int,
          chunk_pairs: int = WRITE_CHUNK_PAIRS) -> None:
    """Tokenizes every pair of ``ids`` into the cache file ``path`` (local, or an object in a
    bucket), whole or not at all."""
    dtype = np.dtype("<u2" if vocab_size <= 1 << 16 else "<i4")
    start_time, start_cpu = time.time(), time.process_time()
    if storage.is_remote(path):
        with tempfile.TemporaryDirectory(prefix="token_cache-") as staging:
            staged = os.path.join(staging, storage.path(path).name)
            _write_records(staged, ids, key, dtype, chunk_pairs)
            size = os.path.getsize(staged)
            storage.upload(staged, path)
    else:
        path = os.fspath(path)
        temporary = path_partials(path).replace("*", uuid.uuid4().hex[:8])
        try:
            _write_records(temporary, ids, key, dtype, chunk_pairs)
            size = os.path.getsize(temporary)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    logging.info("tokenized %s once: %d pairs in %.1fs (%.1f CPU-s), %s -> %s", ids.name,
                 len(ids), time.time() - start_time, time.process_time() - start_cpu,
                 storage.human_bytes(size), path)


def _open(path: storage.Path, key: str, name: str) -> CachedIds | None:
    """The cache at ``path`` if it is whole and of ``key`` (read from this host's copy when
    it is in a bucket); None if there is none."""
    if not path.exists():
        return None
    cached = CachedIds(path, key, name)
    logging.info("%s: reading token ids from %s", name, path)
    return local_copy(cached)


def local_copies() -> pathlib.Path:
    """Where this host keeps its copies of token caches that are in a bucket."""
    root = os.environ.get("TRANSFORMER_JAX_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "transformer_jax")
    return pathlib.Path(root) / "tokens"


def local_copy(cached: CachedIds) -> CachedIds:
    """``cached`` itself if it is on a local disk; otherwise this host's copy of it, made
    now if there is none (a damaged copy is made again). Where no copy can be made, the
    bucket's file, said in one line."""
    if not storage.is_remote(cached.path):
        return cached
    target = local_copies() / storage.path(cached.path).name  # the name holds the key
    with contextlib.suppress(DataError, OSError):
        return CachedIds(target, cached.key, cached.name)
    staged = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        need, free = storage.size(cached.path), storage.free_bytes(target.parent)
        if free is not None and free < 2 * need:
            raise OSError(f"{storage.human_bytes(free)} free for a copy of "
                          f"{storage.human_bytes(need)}")
        storage.download(cached.path, staged)
        os.replace(staged, target)
        local = CachedIds(target, cached.key, cached.name)
    except (OSError, DataError) as e:
        logging.warning("%s: reading the token cache %s from the bucket: no copy on this "
                        "host (%s; set TRANSFORMER_JAX_CACHE to a folder with room)",
                        cached.name, cached.path, getattr(e, "strerror", None) or e)
        return cached
    finally:
        with contextlib.suppress(OSError):
            staged.unlink()
    logging.info("%s: token cache copied to %s (%s), read from there", cached.name, target,
                 storage.human_bytes(storage.size(target)))
    return local


def _remove_partials(path: storage.Path) -> None:
    """Removes what killed writers left of the local file ``path`` (only the lock holder
    writes, so they are no one's)."""
    if storage.is_remote(path):
        return  # an upload that did not finish leaves no object
    before, after = path_partials(os.fspath(path)).split("*")
    for left in glob.glob(glob.escape(before) + "*" + glob.escape(after)):
        os.unlink(left)


def open_or_write(spec: CacheSpec, workdir: storage.PathLike, split: str,
                  source: Sequence[tuple[str, str]], tokenizer: Tokenizer) -> CachedIds | None:
    """The token cache of ``split`` (pairs ``source``) for the run in ``workdir``, written
    the first time; None (the caller tokenizes on the fly, logged in one line) where it
    cannot be written, or when another process holds its lock longer than ``spec.wait_s``.

    Any process may write it: the one that takes its lock does, the others wait for the lock
    (one line says what they wait for) and read what it wrote.
    """
    name = getattr(source, "name", split)
    key = cache_key(tokenizer, source, spec.source_lang, spec.target_lang)
    path = cache_path(layout.token_cache_dir(workdir, spec.directory), split, key)
    with contextlib.suppress(DataError):  # a damaged file is rebuilt under the lock
        if (cached := _open(path, key, name)) is not None:
            return cached

    def waiting(holder: str) -> None:
        logging.info("%s: waiting up to %g s (data.token_cache_wait_s) for the token cache "
                     "%s, which %s is writing", name, spec.wait_s, path, holder)

    lock = locks.Lock(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not lock.acquire(spec.wait_s, waiting):
            logging.warning("%s: the token cache %s was not written within "
                            "data.token_cache_wait_s=%g s; tokenizing on the fly", name,
                            path, spec.wait_s)
            return None
        try:
            try:
                if (cached := _open(path, key, name)) is not None:
                    return cached
            except DataError as e:
                logging.warning("%s; writing it again", e)
            _remove_partials(path)
            write(path, TokenizedPairs(source, tokenizer), key, tokenizer.vocab_size)
        finally:
            lock.release()
    except OSError as e:  # its partial file is gone (write), nothing is left to be read
        logging.warning("%s: cannot write the token cache (%s); tokenizing on the fly", path,
                        e.strerror or e)
        return None
    return local_copy(CachedIds(path, key, name))
