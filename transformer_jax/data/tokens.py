"""Stage 2: the token ids of a split's pairs, read by pair index.

In: a split's text pairs (``sources.py``) and the vocabulary (``tokenizer.py``). Out: an
:class:`Ids`, what the epoch order's chunks are read from and packed (``packing.py``): the
source and target ids of any pairs, each side ending with EOS, as :class:`~packing.Ragged`
arrays. Two kinds give the same ids: :class:`TokenizedPairs` runs SentencePiece on the fly,
``token_cache.CachedIds`` reads the ids written once (``token_cache.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from transformer_jax.data import packing
from transformer_jax.data.packing import Ragged
from transformer_jax.data.tokenizer import Tokenizer

ADD_EOS = True  # every side ends with EOS


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
        return packing.ragged(inputs), packing.ragged(targets)


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
