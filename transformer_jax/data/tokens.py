"""Stage 2: the token ids of a split's pairs, read by pair index.

In: a split's text pairs (``sources.py``) and the vocabulary (``tokenizer.py``). Out: an
:class:`Ids`, what the epoch order's chunks are read from and packed (``packing.py``): the
source and target ids of any pairs, each side ending with EOS, as :class:`Ragged` arrays (a
side's sequences end to end with their lengths, which is how the token cache writes and reads
them). Two kinds give the same ids: :class:`TokenizedPairs` runs SentencePiece on the fly,
``token_cache.CachedIds`` reads the ids written once (``token_cache.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from transformer_jax.data.tokenizer import Tokenizer

ADD_EOS = True  # every side ends with EOS


class Ragged(NamedTuple):
    """Sequences of ids end to end: sequence k is ``values[starts[k]:starts[k] + lengths[k]]``."""

    values: np.ndarray  # int32 [sum(lengths)]
    lengths: np.ndarray  # int64 [sequences]

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.lengths) - self.lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def take(self, which: np.ndarray) -> Ragged:
        """The sequences at the indices ``which`` (or where the mask ``which`` is True)."""
        which = np.flatnonzero(which) if which.dtype == bool else which
        lengths = self.lengths[which]
        into = np.repeat(self.starts[which] - (np.cumsum(lengths) - lengths), lengths)
        return Ragged(self.values[into + np.arange(len(into))], lengths)

    def truncated(self, max_len: int) -> Ragged:
        """Every sequence cut to its first ``max_len`` ids."""
        position = np.arange(len(self.values)) - np.repeat(self.starts, self.lengths)
        return Ragged(self.values[position < max_len], np.minimum(self.lengths, max_len))

    def tolist(self) -> list[list[int]]:
        return [self.values[s:s + n].tolist() for s, n in zip(self.starts, self.lengths,
                                                              strict=True)]


def ragged(sequences: Sequence[Sequence[int]]) -> Ragged:
    """Id lists -> :class:`Ragged`."""
    lengths = np.fromiter(map(len, sequences), np.int64, len(sequences))
    values = np.fromiter(itertools.chain.from_iterable(sequences), np.int32, int(lengths.sum()))
    return Ragged(values, lengths)


class Ids(Protocol):
    """The ids of a split's pairs, read by pair index: what the pipeline packs."""

    name: str

    def __len__(self) -> int: ...

    def read_ids(self, indices: Sequence[int]) -> tuple[Ragged, Ragged]: ...


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
        return ragged(inputs), ragged(targets)


class Head:
    """The first ``n`` pairs of ``ids`` (``evaluate --limit``)."""

    def __init__(self, ids: Ids, n: int):
        self.ids, self.n, self.name = ids, min(n, len(ids)), ids.name

    def __len__(self) -> int:
        return self.n

    def read_ids(self, indices: Sequence[int]) -> tuple[Ragged, Ragged]:
        return self.ids.read_ids(indices)


def as_ids(source: Sequence[tuple[str, str]] | Ids, tokenizer: Tokenizer | None) -> Ids:
    """The ids of a split: ``source`` itself when it holds ids (a token cache), its pairs
    tokenized on the fly by ``tokenizer`` otherwise."""
    if hasattr(source, "read_ids"):
        return source  # type: ignore[return-value]
    if tokenizer is None:
        raise ValueError(f"{source!r} holds text: a tokenizer is needed")
    return TokenizedPairs(source, tokenizer)  # type: ignore[arg-type]
