"""The token cache: each split tokenized once, keyed by what made its ids, written whole or not
at all, and read into exactly the batches that tokenizing on the fly gives."""

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from transformer_jax import config as config_lib
from transformer_jax.data import corpus, pipeline, sources, token_cache, tokenizer as tokenizer_lib
from transformer_jax.errors import DataError

from ..helpers import ROOT
from .test_packing import unpack
from .test_pipeline import assert_same, batches

PAIRS = corpus.build_corpus(seed=0, sizes={"train": 1200})["train"]
MAX_LEN = 32  # short enough that some pairs are too long, counted and skipped


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """Two vocabularies of the same text, in two workdirs."""
    out = {}
    for size in (200, 150):
        workdir = tmp_path_factory.mktemp(f"vocab{size}")
        out[size] = tokenizer_lib.load_or_train(
            workdir, tokenizer_lib.sample_text(iter(PAIRS), 100_000), vocab_size=size)
    return out


def cache_of(workdir, tok, source=PAIRS, split="train", **kwargs):
    return token_cache.open_or_write(workdir, split, source, tok, "en", "de", **kwargs)


def test_the_cache_holds_what_sentencepiece_gives(tmp_path, vocab):
    tok = vocab[200]
    cached = cache_of(tmp_path, tok)
    assert isinstance(cached, token_cache.CachedIds) and len(cached) == len(PAIRS)
    indices = [5, 0, 1199, 5, 17]
    inputs, targets = cached.read_ids(indices)
    assert inputs.tolist() == [tok.encode(PAIRS[i][0]) for i in indices]
    assert targets.tolist() == [tok.encode(PAIRS[i][1]) for i in indices]
    assert inputs.tolist()[0][-1] == targets.tolist()[0][-1] == tokenizer_lib.EOS_ID


def test_train_and_eval_batches_from_the_cache_are_those_of_the_text(tmp_path, vocab,
                                                                     builtin_data_dir,
                                                                     monkeypatch):
    monkeypatch.setattr(pipeline, "READ_THREADS", 0)  # no read-ahead: the counts are exact
    tok = vocab[200]
    config = config_lib.build("base", "builtin")
    config.data.data_dir = str(builtin_data_dir)
    # The built-in corpus's TFDS split (its 1,000 validation pairs: a small cache).
    split = sources.get_source(config.data, "validation")
    cached = cache_of(tmp_path, tok, split, "validation")
    for source in (split, PAIRS):
        ids = cached if source is split else cache_of(tmp_path, tok)

        def run(s):
            return pipeline.train_data(s, tok, max_len=MAX_LEN, rows=8, seed=1,
                                       chunk_pairs=128)

        from_text, from_cache = run(source), run(ids)
        assert_same(batches(from_text, 12), batches(from_cache, 12))
        assert from_text.length_filter.skipped == from_cache.length_filter.skipped > 0
        assert_same(list(pipeline.eval_batches(source, tok, max_len=MAX_LEN, rows=8)),
                    list(pipeline.eval_batches(ids, None, max_len=MAX_LEN, rows=8)))


def test_a_run_on_text_files_reads_the_cache_into_the_same_batches(tmp_path, monkeypatch,
                                                                   caplog):
    monkeypatch.setattr(pipeline, "READ_THREADS", 0)
    long_pair = " ".join(["the dog"] * 40) + "\tder Hund"
    lines = [f"{corpus.detokenize(en)}\t{corpus.detokenize(de)}" for en, de in PAIRS[:600]]
    (tmp_path / "train.tsv").write_text("\n".join(lines[:300] + [long_pair] + lines[300:])
                                        + "\n")
    c = config_lib.build("base", "text")
    c.data.update(train_files=str(tmp_path / "train.tsv"), eval_files=str(tmp_path / "train.tsv"),
                  vocab_size=200, vocab_sample=100_000, max_len=64, row_len=64,
                  tokens_per_batch=8 * 64)
    workdir = tmp_path / "run"
    runs = {}
    for on in (False, True):
        c.data.token_cache = on
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            data = pipeline.data_for(c, workdir, num_devices=1, process_index=0,
                                     process_count=1)
        tok = data.tokenizer
        long_ = [n for n, line in enumerate(lines[:300] + [long_pair] + lines[300:], start=1)
                 if max(len(tok.encode(side)) for side in line.split("\t")) > 64]
        assert 301 in long_
        assert (f"{len(long_)} of 601 pairs longer than data.max_len=64 tokens are skipped in "
                f"training (line{'s' if len(long_) > 1 else ''} {long_[0]}, ") in caplog.text
        assert (workdir / "vocab" / "tokens").exists() == on
        runs[on] = batches(data.train, 6), data.train.length_filter.skipped
    assert_same(runs[False][0], runs[True][0])
    assert runs[False][1] == runs[True][1] > 0
    (cache,) = (workdir / "vocab" / "tokens").glob("train-*.array_record")
    assert len(cache.stem.split("-")[1]) == 16


def test_another_vocabulary_writes_its_own_cache_and_never_reads_the_other(tmp_path, vocab,
                                                                           caplog):
    a = cache_of(tmp_path, vocab[200])
    b = cache_of(tmp_path, vocab[150])
    assert a.path != b.path and os.path.exists(a.path) and os.path.exists(b.path)
    key_b = token_cache.cache_key(vocab[150], PAIRS, "en", "de")
    assert os.path.basename(b.path) == f"train-{key_b[:16]}.array_record"
    with pytest.raises(DataError, match="a token cache of other ids"):
        token_cache.CachedIds(a.path, key_b)
    # Other data (one pair changed) or other languages: another key.
    changed = [*PAIRS[:-1], ("Another sentence.", "Ein anderer Satz.")]
    assert len({key_b, token_cache.cache_key(vocab[150], changed, "en", "de"),
                token_cache.cache_key(vocab[150], PAIRS, "en", "fr")}) == 3
    # The other vocabulary's file under this one's name is refused and written again.
    os.replace(a.path, b.path)
    with caplog.at_level(logging.WARNING):
        again = cache_of(tmp_path, vocab[150])
    assert "a token cache of other ids" in caplog.text and "writing it again" in caplog.text
    assert again.read_ids([3])[0].tolist() == [vocab[150].encode(PAIRS[3][0])]


def test_the_cache_resumes_exactly_and_keeps_each_process_to_its_shard(tmp_path, vocab):
    tok = vocab[200]
    cached = cache_of(tmp_path, tok, PAIRS[:400])

    def fresh(**kw):
        return pipeline.train_data(cached, None, max_len=MAX_LEN, rows=4, seed=3,
                                   chunk_pairs=64, **kw)

    data = fresh()
    batches(data, 3)
    state = json.loads(json.dumps(data.iterator.get_state()))
    expected = batches(data, 30)
    restored = fresh()
    restored.iterator.set_state(state)
    assert_same(batches(restored, 30), expected)

    encoded = [(tuple(tok.encode(en)), tuple(tok.encode(de))) for en, de in PAIRS[:400]]
    fits = [{p for p in encoded[i::2] if max(map(len, p)) <= MAX_LEN} for i in range(2)]
    shards = [{p for b in batches(fresh(process_index=i, process_count=2), 40)
               for p in unpack(b)} for i in range(2)]
    # Each process its own pairs (every other one), all of them within 40 batches (more
    # than two epochs of a shard).
    assert shards == fits and not fits[0] & fits[1]


# Writes the cache of PAIRS slowly (a chunk of 10 pairs every 0.2 s): to be killed mid-way.
KILLED_WRITER = """
import sys, time
from transformer_jax.data import corpus, token_cache, tokenizer as tokenizer_lib

class SlowIds(token_cache.TokenizedPairs):
    def read_ids(self, indices):
        time.sleep(0.2)
        return super().read_ids(indices)

pairs = corpus.build_corpus(seed=0, sizes={"train": 1200})["train"]
tok = tokenizer_lib.Tokenizer(sys.argv[1])
path = token_cache.cache_path(sys.argv[2], "train", token_cache.cache_key(tok, pairs, "en", "de"))
path.parent.mkdir(parents=True)
token_cache.write(path, SlowIds(pairs, tok), "key", 200, chunk_pairs=10)
"""


def test_a_killed_writer_leaves_nothing_that_is_read(tmp_path, vocab, caplog):
    tok = vocab[200]
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tok.path),
                               str(tmp_path)], cwd=ROOT)
    tokens = tmp_path / "vocab" / "tokens"
    deadline = time.time() + 60
    while not list(tokens.glob("*.partial")) and writer.poll() is None:
        assert time.time() < deadline
        time.sleep(0.05)
    time.sleep(0.3)  # a few chunks written
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    (partial,) = tokens.glob("*.partial")
    assert partial.exists() and not list(tokens.glob("*.array_record"))
    cached = cache_of(tmp_path, tok)  # written anew; the partial file is removed
    assert not list(tokens.glob("*.partial"))
    assert cached.read_ids([1199])[1].tolist() == [tok.encode(PAIRS[1199][1])]
    # A writer that fails mid-way leaves nothing either.
    with pytest.raises(ZeroDivisionError):
        token_cache.write(tokens / "other.array_record", FailingIds(), "key", 200)
    assert sorted(p.name for p in tokens.iterdir() if not p.name.endswith(".lock")) == [
        os.path.basename(cached.path)]


class FailingIds:
    name = "failing"

    def __len__(self):
        return 10

    def read_ids(self, indices):
        return 1 / 0


def test_a_damaged_cache_is_written_again_and_an_unwritable_one_is_passed_by(tmp_path, vocab,
                                                                           caplog):
    tok = vocab[200]
    path = cache_of(tmp_path, tok).path
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])  # half a file
    with pytest.raises(DataError, match=f"{path}: damaged token cache"):
        token_cache.CachedIds(path, token_cache.cache_key(tok, PAIRS, "en", "de"))
    with caplog.at_level(logging.WARNING):
        cached = cache_of(tmp_path, tok)
    assert "damaged token cache" in caplog.text and os.path.getsize(path) == len(data)
    assert cached.read_ids([7])[0].tolist() == [tok.encode(PAIRS[7][0])]
    # A process other than the first waits for the first's file, then tokenizes itself.
    assert cache_of(tmp_path, tok, is_chief=False).path == path
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cache_of(tmp_path / "none", tok, is_chief=False, timeout_s=0.2,
                        poll_s=0.05) is None
    assert "wrote no token cache in 0s; tokenizing on the fly" in caplog.text
    # Where the cache cannot be written (here a file stands where its folder would), the
    # pairs are tokenized on the fly.
    (tmp_path / "ro" / "vocab").mkdir(parents=True)
    (tmp_path / "ro" / "vocab" / "tokens").write_text("")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cache_of(tmp_path / "ro", tok) is None
    assert "cannot write the token cache" in caplog.text and "tokenizing on the fly" in \
        caplog.text
