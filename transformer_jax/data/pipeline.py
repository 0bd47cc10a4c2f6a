"""From a config to batches: the data side of a run, its stages read top to bottom.

:class:`DataSpec` reads the config once (``DataSpec.from_config``); each stage takes the small
frozen spec of the fields it needs, so a setting followed through the code goes down the
stages and never back up:

1. source (``sources.py``, :class:`~sources.SourceSpec`): a split's text pairs;
   the vocabulary (``tokenizer.py``, :class:`~tokenizer.VocabSpec`) is trained once on a
   sample of the training pairs (:func:`vocab_sample`);
2. token ids (``tokens.py``), written once to the token cache shared by every run of the
   same vocabulary and data, and read from it (``token_cache.py``,
   :class:`~token_cache.CacheSpec`);
3. epoch order (``order.py``): which pairs, in what order, reshuffled every epoch, computed
   on the fly;
4. packing into rows (``packing.py``), rows of a length chosen once (``rows.py``,
   :class:`~rows.RowSpec`);
5. batches and their shapes (``batching.py``, :class:`~batching.BatchSpec`).

:func:`data_for` puts them together for a training run: vocabulary, batch shape, the
training iterator (its position saved with every checkpoint, so a resumed run sees exactly
the batches an uninterrupted one would have) and the validation split's ids.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from transformer_jax.config import datasets
from transformer_jax.data import (
    batching,
    rows as rows_lib,
    sources,
    text,
    token_cache,
    tokenizer as tokenizer_lib,
)
from transformer_jax.data.batching import BatchShape, BatchSpec, TrainData
from transformer_jax.data.order import epoch_order
from transformer_jax.data.rows import RowSpec
from transformer_jax.data.sources import SourceSpec
from transformer_jax.data.token_cache import CacheSpec
from transformer_jax.data.tokenizer import Tokenizer, VocabSpec
from transformer_jax.data.tokens import Ids, TokenizedPairs, read_pairs
from transformer_jax.io import storage

TOKENS_PER_BATCH_TOLERANCE = 0.1  # warn when whole rows miss data.tokens_per_batch by more
VOCAB_SAMPLE_CHUNK = 4096  # pairs read together for the vocabulary's sample


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """Every data setting of a run, read once from its config, one spec a stage."""

    source: SourceSpec
    vocab: VocabSpec
    cache: CacheSpec
    rows: RowSpec
    batch: BatchSpec
    test_split: bool = False  # the run reads the test split (BLEU or samples at the end)

    @classmethod
    def from_config(cls, config: Any) -> DataSpec:
        """The spec of an experiment config (its ``data`` section, the accumulation steps
        and whether training decodes the test split)."""
        d = config.data
        return cls(
            source=SourceSpec.from_config(d),
            vocab=VocabSpec(d.vocab_size, d.vocab_sample),
            cache=CacheSpec(d.token_cache, d.token_cache_dir, float(d.token_cache_wait_s),
                            d.source_lang, d.target_lang),
            rows=RowSpec(d.max_len, d.row_len, datasets.get(d.name).rows_from_data),
            batch=BatchSpec(d.tokens_per_batch, d.max_len, config.optim.grad_accum_steps,
                            d.packing, d.num_shards, d.shuffle_seed),
            test_split=bool(config.train.bleu_sentences or config.train.samples))


def vocab_sample(source: Sequence[tuple[str, str]], max_chars: int,
                 seed: int = 0) -> Iterator[str]:
    """Sentences of both sides in a seeded random order until ``max_chars`` per side: the
    sample the vocabulary is trained on. Lazy: nothing is read unless it is consumed."""
    order = epoch_order(len(source), seed)

    def pairs() -> Iterator[tuple[str, str]]:
        for start in range(0, len(order), VOCAB_SAMPLE_CHUNK):
            yield from read_pairs(source, order.positions(
                start, min(start + VOCAB_SAMPLE_CHUNK, len(order))))

    return tokenizer_lib.sample_text(pairs(), max_chars)


def split_ids(spec: DataSpec, workdir: storage.PathLike, split: str, tokenizer: Tokenizer,
              source: Sequence[tuple[str, str]] | None = None) -> Ids:
    """The ids of a split (its pairs ``source``, read from the spec when None): from its
    token cache (written the first time, ``token_cache.open_or_write``) when
    ``data.token_cache`` is on and the cache can be written or read; tokenized on the fly
    otherwise."""
    source = sources.get_source(spec.source, split) if source is None else source
    cached = (token_cache.open_or_write(spec.cache, workdir, split, source, tokenizer)
              if spec.cache.enabled else None)
    return cached if cached is not None else TokenizedPairs(source, tokenizer)


def write_token_cache(spec: DataSpec, workdir: storage.PathLike,
                      splits: Sequence[str] = ("train", "validation")) -> dict[str, Ids]:
    """Writes the token cache of each of ``splits`` with the workdir's vocabulary (which
    must exist) where it is not there yet: what a run would write on first use. Returns the
    ids of each split (on the fly where the cache could not be written)."""
    tokenizer = Tokenizer(tokenizer_lib.vocab_path(workdir))
    spec = dataclasses.replace(spec, cache=dataclasses.replace(spec.cache, enabled=True))
    return {split: split_ids(spec, workdir, split, tokenizer) for split in splits}


class Data(NamedTuple):
    """The data side of a training run (see :func:`data_for`)."""

    tokenizer: Tokenizer
    train: TrainData
    rows: int  # rows of a micro-batch over all devices and processes
    shape: BatchShape
    eval_rows: int  # rows of data.max_len slots of an evaluation batch (about as many tokens)
    eval_source: sources.Source  # the validation split's pairs
    eval_ids: Ids  # and their ids


def data_for(config: Any, workdir: storage.PathLike, num_devices: int,
             process_index: int | None = None, process_count: int | None = None) -> Data:
    """:func:`data_of` the spec of an experiment config (for callers that hold one)."""
    return data_of(DataSpec.from_config(config), workdir, num_devices, process_index,
                   process_count)


def data_of(spec: DataSpec, workdir: storage.PathLike, num_devices: int,
            process_index: int | None = None, process_count: int | None = None) -> Data:
    """The vocabulary, row length, batch iterator and validation ids of a run's data.

    The vocabulary is the workdir's, trained on ``data.vocab_sample`` characters per side the
    first time (by process 0 only; the others wait for its file); so is the row length
    (``rows.row_len_of``). The splits' ids come from the token cache (:func:`split_ids`).
    ``num_devices`` is the devices this process trains on; process index and count default
    to JAX's.
    """
    if process_index is None or process_count is None:
        import jax

        process_index, process_count = jax.process_index(), jax.process_count()
    chief = process_index == 0
    train_source = sources.get_source(spec.source, "train")
    # The other splits are opened now so that a missing split or a bad file stops the run
    # before anything is trained; text files are read once (sources caches them).
    eval_source = sources.get_source(spec.source, "validation")
    if spec.test_split:
        sources.get_source(spec.source, "test")
    # The vocabulary's sample does not follow data.shuffle_seed: replicas of a run over seeds
    # share one vocabulary, as the paper's variants do.
    tokenizer = tokenizer_lib.load_or_train(
        workdir, vocab_sample(train_source, spec.vocab.sample_chars, 0), spec.vocab.size,
        is_chief=chief)
    train_ids = split_ids(spec, workdir, "train", tokenizer, train_source)
    row_len = rows_lib.row_len_of(spec.rows, workdir, train_source, tokenizer, is_chief=chief)
    if isinstance(train_source, text.TextPairs):
        rows_lib.report_long_pairs(train_source, train_ids, row_len,
                                   limit=rows_lib.row_limit(spec.rows, row_len))
    b = spec.batch
    shape_of = functools.partial(batching.batch_shape, b.tokens_per_batch,
                                 grad_accum_steps=b.grad_accum_steps, num_devices=num_devices,
                                 process_count=process_count, num_shards=b.num_shards)
    shape = shape_of(row_len)
    miss = shape.slots_per_step / b.tokens_per_batch - 1
    log = logging.warning if abs(miss) > TOKENS_PER_BATCH_TOLERANCE else logging.info
    log("batches: %d rows x %d slots x %d accumulation steps = %d slots per side per step "
        "(data.tokens_per_batch=%d, %+.0f%%) over %d device(s) x %d process(es)", shape.rows,
        row_len, shape.grad_accum_steps, shape.slots_per_step, b.tokens_per_batch,
        100 * miss, num_devices, process_count)
    train = batching.train_data(train_ids, tokenizer, max_len=row_len, rows=shape.local_rows,
                                seed=b.seed, packing=b.packing, process_index=process_index,
                                process_count=process_count, num_shards=b.num_shards)
    eval_ids = split_ids(spec, workdir, "validation", tokenizer, eval_source)
    return Data(tokenizer, train, shape.rows, shape, shape_of(b.max_len).rows, eval_source,
                eval_ids)
