"""The shared source-target BPE vocabulary (SentencePiece), trained on a sample of the
source (``sources.py``) and used by every later stage.

Ids: 0 is padding (and the decoder's start symbol), 1 is end of sentence, 2 is unknown.
The model file lives in the workdir (``vocab/spm.model``) and is reused on resume; it is
written to a temporary name and renamed, so a killed run never leaves half a vocabulary.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm

from transformer_jax.errors import DataError
from transformer_jax.io import layout, storage

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class VocabSpec:
    """The vocabulary a run trains: ``data.vocab_size`` pieces, on ``data.vocab_sample``
    characters per side."""

    size: int
    sample_chars: int


class Tokenizer:
    """Text <-> ids with a trained SentencePiece model.

    Raises DataError naming the file when it is missing or not a SentencePiece model (a
    damaged ``vocab/spm.model``), so every command reports it in one line.
    """

    def __init__(self, model_path: str | os.PathLike):
        self.path = storage.path(model_path)
        why = storage.not_a_file(self.path)  # a named pipe would be waited on forever
        if why == "no such file":
            raise DataError(f"{self.path}: no such vocabulary file")
        if why:
            raise DataError(f"{self.path}: {why}, not a vocabulary file")
        proto = self.path.read_bytes()
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=proto)
        except (RuntimeError, OSError):  # sentencepiece's parse error is a RuntimeError
            raise DataError(f"{self.path}: damaged vocabulary, not a SentencePiece model"
                            ) from None
        # An empty file parses as a model of no pieces; another tool's model numbers its
        # special pieces otherwise. Either would translate into nothing, without a word.
        special = (self.sp.pad_id(), self.sp.eos_id(), self.sp.unk_id())
        if self.sp.get_piece_size() < 3 or special != (PAD_ID, EOS_ID, UNK_ID):
            raise DataError(f"{self.path}: not a vocabulary of this project ("
                            f"{self.sp.get_piece_size()} pieces; padding, end of sentence and "
                            f"unknown are ids {self.sp.pad_id()}, {self.sp.eos_id()}, "
                            f"{self.sp.unk_id()}, not {PAD_ID}, {EOS_ID}, {UNK_ID})")

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str, add_eos: bool = True) -> list[int]:
        """A sentence -> ids, ending with EOS_ID."""
        ids = self.sp.encode(text)
        return ids + [EOS_ID] if add_eos else ids

    def encode_batch(self, texts: Sequence[str], add_eos: bool = True) -> list[list[int]]:
        ids = self.sp.encode(list(texts))
        return [x + [EOS_ID] for x in ids] if add_eos else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text, stopping at the first EOS (padding is skipped). DataError naming the
        file for an id that is none of its pieces: a model of a larger vocabulary."""
        out = []
        for i in ids:
            i = self._piece(i)
            if i == EOS_ID:
                break
            if i != PAD_ID:
                out.append(i)
        return self.sp.decode(out)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The subword strings of ids, for labelling pictures."""
        return [self.sp.id_to_piece(self._piece(i)) for i in ids]

    def _piece(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self.sp.get_piece_size():
            raise DataError(f"{self.path}: id {i} is none of its {self.sp.get_piece_size()} "
                            "pieces: the ids come from a model of another vocabulary")
        return i


def train_tokenizer(sentences: Iterable[str], vocab_size: int, model_path: str | os.PathLike,
                    max_sentence_length: int = 8192) -> Tokenizer:
    """Trains a BPE model on ``sentences`` and writes it atomically to ``model_path``.

    Sentences longer than ``max_sentence_length`` bytes are left out of training (as
    SentencePiece would, silently) and their number is logged.
    """
    model_path = storage.path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    start = time.time()
    too_long = [0]

    def fitting() -> Iterator[str]:
        for sentence in sentences:
            if len(sentence.encode("utf-8")) > max_sentence_length:
                too_long[0] += 1
            else:
                yield sentence

    spm.SentencePieceTrainer.train(
        sentence_iterator=fitting(), model_writer=buffer, model_type="bpe",
        vocab_size=vocab_size, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        character_coverage=1.0, hard_vocab_limit=False, num_threads=os.cpu_count() or 1,
        max_sentence_length=max_sentence_length, minloglevel=2)
    storage.write_atomically(model_path, buffer.getvalue())
    tokenizer = Tokenizer(model_path)
    logging.info("trained a %d-piece BPE vocabulary in %.1fs -> %s", tokenizer.vocab_size,
                 time.time() - start, model_path)
    if too_long[0]:
        logging.warning("left %d sentence(s) longer than %d bytes out of the vocabulary sample",
                        too_long[0], max_sentence_length)
    return tokenizer


def vocab_path(workdir: str | os.PathLike) -> storage.Path:
    """Where a run keeps its vocabulary."""
    return storage.path(workdir) / layout.VOCAB / layout.VOCAB_MODEL


def load_or_train(workdir: str | os.PathLike, sample: Iterable[str] | None, vocab_size: int,
                  is_chief: bool = True, timeout_s: float = 3600.0,
                  poll_s: float = 1.0) -> Tokenizer:
    """The workdir's vocabulary, trained on ``sample`` the first time.

    A vocabulary already in the workdir (a resumed run) is loaded and ``sample`` is not read.
    In a multi-host run only the chief (process 0) trains; the others poll every ``poll_s``
    seconds for its file (the workdir must be shared) and raise TimeoutError after
    ``timeout_s``.
    """
    path = vocab_path(workdir)
    if path.exists():
        logging.info("using the vocabulary in %s", path)
        return Tokenizer(path)
    if is_chief:
        if sample is None:
            raise FileNotFoundError(f"{path}: no vocabulary in the workdir and nothing to train "
                                    "one on")
        return train_tokenizer(sample, vocab_size, path)
    deadline = time.time() + timeout_s
    if not path.exists():
        logging.info("waiting up to %g s for the vocabulary %s, which process 0 trains",
                     timeout_s, path)
    while not path.exists():
        if time.time() > deadline:
            raise TimeoutError(f"{path}: process 0 did not write the vocabulary in {timeout_s}s")
        time.sleep(poll_s)
    return Tokenizer(path)


def sample_text(pairs: Iterator[tuple[str, str]], max_chars: int) -> Iterator[str]:
    """Source and target sentences from ``pairs`` until ``max_chars`` per side are taken."""
    taken = np.zeros(2, dtype=np.int64)
    for src, tgt in pairs:
        if taken.min() >= max_chars:
            return
        for side, text in enumerate((src, tgt)):
            if taken[side] < max_chars and text:
                taken[side] += len(text)
                yield text
