"""Token ids of a split, tokenized once: the cache the training pipeline reads.

Tokenizing a pair with SentencePiece costs far more than reading, packing and batching it.
The first time a workdir's vocabulary is used, each split it trains or evaluates on is
tokenized once and written next to the vocabulary (``vocab/tokens/``, names in
``io/layout.py``) as array_record: record 0 a JSON header, record k + 1 pair k's source and
target ids (a little-endian uint32 source length, then the source ids and the target ids,
uint16 for a vocabulary of at most 65,536 pieces, int32 beyond). One record a group and no
compression, so a random read of a pair is one read.

The file is keyed by what determines the ids (:func:`cache_key`): the SentencePiece model's
bytes, the split (a TFDS dataset's name, version, split and languages; the text of every
pair of text files), the languages, the end-of-sentence id and this format. The key names
the file and is checked against its header, so another vocabulary or other data never reads
it. It is written to a temporary name and renamed, so a killed writer leaves nothing that
is read; a damaged or mismatched file is rebuilt with one warning line.

Both readers give the same ids (:class:`TokenizedPairs` on the fly, :class:`CachedIds` from
the cache), so the batches are the same whichever is read. Without a cache (``data.token_cache
= False``, a workdir in a bucket, or a cache that cannot be written: a read-only location)
pairs are tokenized on the fly.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
from array_record.python import array_record_data_source, array_record_module

from transformer_jax.data import packing, text
from transformer_jax.data.packing import Ragged
from transformer_jax.data.tokenizer import Tokenizer, vocab_path
from transformer_jax.errors import DataError
from transformer_jax.io import layout, storage

FORMAT = 1  # of the records; a new format is a new key
ADD_EOS = True  # every side ends with EOS, as the pipeline encodes it
WRITER_OPTIONS = "group_size:1,uncompressed"  # one record a group: a random read is one read
WRITE_CHUNK_PAIRS = 4096  # pairs tokenized together when the cache is written
HEADER_BYTES = 4  # the source length at the start of each record (little-endian uint32)


def read_pairs(source: Sequence[tuple[str, str]], indices: Sequence[int]) -> list[tuple[str, str]]:
    """The pairs at ``indices``, in one batched read where the source offers one."""
    if hasattr(source, "read"):
        return source.read(indices)  # type: ignore[attr-defined]
    return [source[int(i)] for i in indices]


def encode_pairs(tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]]
                 ) -> tuple[list[list[int]], list[list[int]]]:
    """Source and target id lists of ``pairs``, each ending with EOS."""
    return (tokenizer.encode_batch([p[0] for p in pairs], add_eos=ADD_EOS),
            tokenizer.encode_batch([p[1] for p in pairs], add_eos=ADD_EOS))


class Ids(Protocol):
    """The ids of a split's pairs, read by pair index: what the pipeline packs."""

    name: str

    def __len__(self) -> int: ...

    def read_ids(self, indices: Sequence[int]) -> tuple[Ragged, Ragged]: ...


class TokenizedPairs:
    """The ids of the pairs of ``source``, tokenized on the fly."""

    def __init__(self, source: Sequence[tuple[str, str]], tokenizer: Tokenizer):
        self.source = source
        self.tokenizer = tokenizer
        self.name = getattr(source, "name", "evaluation split")

    def __len__(self) -> int:
        return len(self.source)

    def read_ids(self, indices: Sequence[int]) -> tuple[Ragged, Ragged]:
        inputs, targets = encode_pairs(self.tokenizer, read_pairs(self.source, indices))
        return packing.ragged(inputs), packing.ragged(targets)


class CachedIds:
    """The ids of a split read from its token cache at ``path``, checked against ``key``.

    Raises DataError naming the file for one that is not a whole cache of that key.
    """

    def __init__(self, path: storage.PathLike, key: str, name: str = ""):
        self.path = os.fspath(path)
        self.name = name or self.path
        try:
            self.records = array_record_data_source.ArrayRecordDataSource([self.path])
            header = json.loads(self.records[0])
        except Exception as e:  # noqa: BLE001  array_record raises several types for a bad file
            raise DataError(f"{self.path}: damaged token cache ({type(e).__name__})") from None
        if not isinstance(header, dict) or header.get("key") != key:
            raise DataError(f"{self.path}: a token cache of other ids (another vocabulary or "
                            "other data)")
        if header.get("pairs") != len(self.records) - 1:
            raise DataError(f"{self.path}: damaged token cache: {len(self.records) - 1} "
                            f"records for the {header.get('pairs')} pairs its header names")
        self.dtype = np.dtype(header["dtype"])

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


def cache_path(workdir: storage.PathLike, split: str, key: str) -> storage.Path:
    """Where the workdir keeps the token cache of ``split`` for ``key``."""
    return (vocab_path(workdir).with_name(layout.TOKEN_CACHE)
            / layout.TOKEN_CACHE_FILE.format(split=split, key=key[:layout.TOKEN_CACHE_KEY_CHARS]))


def path_partials(path: str) -> str:
    """The pattern of the temporary names that ``path`` is written under."""
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.*.partial")


def write(path: storage.PathLike, ids: Ids, key: str, vocab_size: int,
          chunk_pairs: int = WRITE_CHUNK_PAIRS) -> None:
    """Tokenizes every pair of ``ids`` into the cache file ``path``, whole or not at all."""
    path = os.fspath(path)
    dtype = np.dtype("<u2" if vocab_size <= 1 << 16 else "<i4")
    temporary = path_partials(path).replace("*", uuid.uuid4().hex[:8])
    start_time = time.time()
    try:
        writer = array_record_module.ArrayRecordWriter(temporary, WRITER_OPTIONS)
        if not writer.ok():
            raise OSError(f"cannot write {temporary}")
        writer.write(json.dumps({"key": key, "pairs": len(ids), "dtype": dtype.str,
                                 "format": FORMAT, "split": ids.name}).encode())
        for start in range(0, len(ids), chunk_pairs):
            inputs, targets = ids.read_ids(range(start, min(start + chunk_pairs, len(ids))))
            for record in encode_records(inputs, targets, dtype):
                writer.write(record)
        if not writer.ok():
            raise OSError(f"writing {temporary} failed (is the disk full?)")
        try:
            writer.close()
        except RuntimeError as e:  # array_record's error for a failed write
            raise OSError(f"writing {temporary} failed ({e})") from None
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    logging.info("tokenized %s once: %d pairs in %.1fs -> %s", ids.name, len(ids),
                 time.time() - start_time, path)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    """Holds a lock file next to ``path`` (the processes of one machine take turns)."""
    with open(os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock"),
              "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _open(path: str, key: str, name: str) -> CachedIds | None:
    """The cache at ``path`` if it is whole and of ``key``; None if there is none."""
    if not os.path.exists(path):
        return None
    return CachedIds(path, key, name)


def open_or_write(workdir: storage.PathLike, split: str, source: Sequence[tuple[str, str]],
                  tokenizer: Tokenizer, source_lang: str, target_lang: str,
                  is_chief: bool = True, timeout_s: float = 3600.0,
                  poll_s: float = 1.0) -> CachedIds | None:
    """The token cache of ``split`` (pairs ``source``) in the workdir, written the first time.

    Only the chief (process 0) writes, under a lock (a second command on the machine waits
    for it); the others poll every ``poll_s`` seconds for its file. None (the caller
    tokenizes on the fly, logged in one line) for a workdir in a bucket, a cache that cannot
    be written, or one that the chief has not written within ``timeout_s``.
    """
    name = getattr(source, "name", split)
    if storage.is_remote(workdir):
        logging.info("%s: tokenized on the fly (the token cache needs a local workdir)", name)
        return None
    key = cache_key(tokenizer, source, source_lang, target_lang)
    path = os.fspath(cache_path(workdir, split, key))
    if not is_chief:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            with contextlib.suppress(DataError):  # being replaced by the chief
                if (cached := _open(path, key, name)) is not None:
                    return cached
            time.sleep(poll_s)
        logging.warning("%s: process 0 wrote no token cache in %.0fs; tokenizing on the fly",
                        path, timeout_s)
        return None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with _locked(path):
            try:
                if (cached := _open(path, key, name)) is not None:
                    logging.info("%s: reading token ids from %s", name, path)
                    return cached
            except DataError as e:
                logging.warning("%s; writing it again", e)
            before, after = path_partials(path).split("*")
            for left in glob.glob(glob.escape(before) + "*" + glob.escape(after)):
                os.unlink(left)  # left by a killed writer: only the lock holder writes
            write(path, TokenizedPairs(source, tokenizer), key, tokenizer.vocab_size)
    except OSError as e:
        logging.warning("%s: cannot write the token cache (%s); tokenizing on the fly", path,
                        e.strerror or e)
        return None
    return CachedIds(path, key, name)
