"""The shared BPE vocabulary: special ids, one model per workdir, reused on resume, and in a
multi-host run trained by process 0 while the others wait for its file."""

import logging
import os
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from transformer_jax.data import corpus, tokenizer as tokenizer_lib
from transformer_jax.errors import DataError

PAIRS = corpus.build_corpus(seed=0, sizes={"train": 2000})["train"]


def sample():
    return tokenizer_lib.sample_text(iter(PAIRS), max_chars=100_000)


def never_read():
    raise AssertionError("the sample was read although a vocabulary exists")
    yield  # pragma: no cover


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("vocab_run")
    return workdir, tokenizer_lib.load_or_train(workdir, sample(), vocab_size=300)


def test_one_shared_bpe_vocabulary_with_fixed_special_ids(trained):
    workdir, tok = trained
    assert tok.path == workdir / "vocab" / "spm.model"
    assert (tokenizer_lib.PAD_ID, tokenizer_lib.EOS_ID, tokenizer_lib.UNK_ID) == (0, 1, 2)
    assert tok.sp.id_to_piece(0) == "<pad>" and tok.sp.id_to_piece(1) == "</s>"
    assert tok.sp.id_to_piece(2) == "<unk>" and tok.sp.bos_id() == -1
    assert 250 <= tok.vocab_size <= 300
    en, de = PAIRS[0]
    for text in (en, de):  # one model encodes both languages
        ids = tok.encode(text)
        assert ids[-1] == tokenizer_lib.EOS_ID and tokenizer_lib.UNK_ID not in ids
        assert tok.decode(ids + [5, 6]) == text  # decoding stops at EOS
    assert tok.encode_batch([en, de]) == [tok.encode(en), tok.encode(de)]


def test_a_resumed_run_reuses_the_vocabulary_without_reading_the_sample(trained):
    workdir, first = trained
    before = first.path.read_bytes(), os.stat(first.path).st_mtime_ns
    again = tokenizer_lib.load_or_train(workdir, never_read(), vocab_size=300)
    assert (again.path.read_bytes(), os.stat(again.path).st_mtime_ns) == before
    assert again.encode(PAIRS[1][1]) == first.encode(PAIRS[1][1])


def test_a_non_chief_waits_for_the_chiefs_file(tmp_path):
    got = {}

    def non_chief():
        got["tok"] = tokenizer_lib.load_or_train(tmp_path, never_read(), 300, is_chief=False,
                                                 timeout_s=60, poll_s=0.05)

    waiter = threading.Thread(target=non_chief)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not (tmp_path / "vocab").exists()  # still waiting
    chief = tokenizer_lib.load_or_train(tmp_path, sample(), 300, is_chief=True)
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert got["tok"].sp.serialized_model_proto() == chief.sp.serialized_model_proto()


def test_a_non_chief_gives_up_naming_the_file(tmp_path):
    with pytest.raises(TimeoutError, match=r"vocab/spm.model: process 0 did not write"):
        tokenizer_lib.load_or_train(tmp_path, None, 300, is_chief=False, timeout_s=0.2,
                                    poll_s=0.05)


def test_the_chief_needs_a_sample_when_there_is_no_vocabulary(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing to train one on"):
        tokenizer_lib.load_or_train(tmp_path, None, 300)


def test_the_sample_takes_about_max_chars_per_side():
    texts = list(tokenizer_lib.sample_text(iter(PAIRS), max_chars=5_000))
    english = {en for en, _ in PAIRS}
    en = sum(len(t) for t in texts if t in english)
    de = sum(len(t) for t in texts if t not in english)
    longest = max(len(t) for p in PAIRS for t in p)
    assert 5_000 <= en < 5_000 + longest and 5_000 <= de < 5_000 + longest


def test_over_long_sample_sentences_are_left_out_and_counted(tmp_path, caplog):
    texts = [en for en, _ in PAIRS[:500]] + ["x" * 300, "y" * 400]
    with caplog.at_level(logging.WARNING):
        tokenizer_lib.train_tokenizer(texts, 100, tmp_path / "spm.model",
                                      max_sentence_length=200)
    assert "left 2 sentence(s) longer than 200 bytes out of the vocabulary sample" in caplog.text


# ----------------------------------------------------------------------------------------
# Round trips (hypothesis)

# Words of the corpus's own characters: text the vocabulary covers entirely.
CORPUS_CHARS = sorted({ch for pair in PAIRS for side in pair for ch in side if not ch.isspace()})
CORPUS_TEXT = st.lists(st.text(st.sampled_from(CORPUS_CHARS), min_size=1, max_size=12),
                       min_size=1, max_size=20).map(" ".join)


@settings(max_examples=50, deadline=None)
@given(CORPUS_TEXT)
def test_text_of_the_corpus_characters_survives_the_round_trip_exactly(trained, sentence):
    _, tok = trained
    ids = tok.encode(sentence)
    assert ids[-1] == tokenizer_lib.EOS_ID and tokenizer_lib.UNK_ID not in ids
    assert tok.decode(ids) == sentence


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=60),  # no lone surrogates
    st.sampled_from(["", "   ", "\t\r\x0b", "Привет, мир", "東京は晴れ", "שלום", "🙂🙃",
                     "a\x00b\x07\x1b[31m", "\x08", "a\u200bb\u2028c", "\u2581", "\x85",
                     "x" * 3000])),
    max_size=6))
def test_any_text_encodes_and_decodes_one_sentence_per_input(trained, sentences):
    _, tok = trained
    batch = tok.encode_batch(sentences)
    assert len(batch) == len(sentences)
    for sentence, ids in zip(sentences, batch, strict=True):
        assert ids == tok.encode(sentence) and ids[-1] == tokenizer_lib.EOS_ID
        assert all(0 <= i < tok.vocab_size for i in ids)
        assert tokenizer_lib.PAD_ID not in ids and tokenizer_lib.EOS_ID not in ids[:-1]
        decoded = tok.decode(ids)
        # The model's normaliser (NFKC, most control characters dropped, runs of white space
        # folded) gives the text it sees: of characters the vocabulary knows, that text comes
        # back exactly; unknown characters come back as a mark. Python's NFKC alone is not the
        # oracle: it keeps the control characters (a backspace, say) the normaliser drops.
        # (Split at its spaces only: str.split would also split at characters such as U+0085
        # that the normaliser keeps and the vocabulary does not know.)
        words = [w for w in tok.sp.normalize(sentence).split("\u2581") if w]
        if set("".join(words)) <= set(CORPUS_CHARS):
            assert decoded == " ".join(words)
        else:
            assert tokenizer_lib.UNK_ID in ids and "\u2047" in decoded


def test_a_damaged_or_missing_vocabulary_names_the_file(tmp_path):
    path = tokenizer_lib.vocab_path(tmp_path)
    with pytest.raises(DataError, match=rf"^{path}: no such vocabulary file$"):
        tokenizer_lib.Tokenizer(path)
    path.parent.mkdir()
    path.write_bytes(b"\x0a\x07 cut short")
    # A resumed run loads it rather than training another: the damage is reported.
    with pytest.raises(DataError, match=rf"^{path}: damaged vocabulary, not a SentencePiece "
                                        "model$"):
        tokenizer_lib.load_or_train(tmp_path, never_read(), 100)
