"""The token cache: each split tokenized once, keyed by what made its ids, written whole or not
at all, and read into exactly the batches that tokenizing on the fly gives."""

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from transformer_jax import config as config_lib
from transformer_jax.data import (
    batching,
    corpus,
    pipeline,
    sources,
    token_cache,
    tokenizer as tokenizer_lib,
)
from transformer_jax.errors import DataError
from transformer_jax.io import locks, storage

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


def cache_of(workdir, tok, source=PAIRS, split="train", **spec):
    return token_cache.open_or_write(token_cache.CacheSpec(**spec), workdir, split, source, tok)


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
    monkeypatch.setattr(batching, "READ_THREADS", 0)  # no read-ahead: the counts are exact
    tok = vocab[200]
    config = config_lib.build("base", "builtin")
    config.data.data_dir = str(builtin_data_dir)
    # The built-in corpus's TFDS split (its 1,000 validation pairs: a small cache).
    split = sources.get_source(config.data, "validation")
    cached = cache_of(tmp_path, tok, split, "validation")
    for source in (split, PAIRS):
        ids = cached if source is split else cache_of(tmp_path, tok)

        def run(s):
            return batching.train_data(s, tok, max_len=MAX_LEN, rows=8, seed=1,
                                       chunk_pairs=128)

        from_text, from_cache = run(source), run(ids)
        assert_same(batches(from_text, 12), batches(from_cache, 12))
        assert from_text.length_filter.skipped == from_cache.length_filter.skipped > 0
        assert_same(list(batching.eval_batches(source, tok, max_len=MAX_LEN, rows=8)),
                    list(batching.eval_batches(ids, None, max_len=MAX_LEN, rows=8)))


def test_a_run_on_text_files_reads_the_cache_into_the_same_batches(tmp_path, monkeypatch,
                                                                   caplog):
    monkeypatch.setattr(batching, "READ_THREADS", 0)
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
        return batching.train_data(cached, None, max_len=MAX_LEN, rows=4, seed=3,
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


# Writes the cache of PAIRS as a run would, under its lock, slowly (5 ms a pair, 6 s in all):
# to be waited for, or killed mid-way.
SLOW_WRITER = """
import logging, sys, time
from transformer_jax.data import corpus, token_cache, tokenizer as tokenizer_lib, tokens

class SlowIds(tokens.TokenizedPairs):
    def read_ids(self, indices):
        time.sleep(0.005 * len(indices))
        return super().read_ids(indices)

logging.basicConfig(level=logging.INFO)
token_cache.TokenizedPairs = SlowIds
pairs = corpus.build_corpus(seed=0, sizes={"train": 1200})["train"]
tok = tokenizer_lib.Tokenizer(sys.argv[1])
token_cache.open_or_write(token_cache.CacheSpec(), sys.argv[2], "train", pairs, tok)
"""


def slow_writer(tok, workdir, **kwargs):
    return subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(tok.path), str(workdir)],
                            cwd=ROOT, **kwargs)


def wait_for_partial(writer, folder):
    deadline = time.time() + 60
    while not list(folder.glob("*.partial")) and writer.poll() is None:
        assert time.time() < deadline
        time.sleep(0.05)


def test_one_process_writes_the_cache_and_another_waits_then_reads_it(tmp_path, vocab, caplog):
    tok = vocab[200]
    writer = slow_writer(tok, tmp_path, stderr=subprocess.PIPE, text=True)
    wait_for_partial(writer, tmp_path / "vocab" / "tokens")
    with caplog.at_level(logging.INFO):
        cached = cache_of(tmp_path, tok, wait_s=120)
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err[-2000:]
    # Tokenized once, by the writer; this process said what it waited for, then read it.
    assert err.count(" once: 1200 pairs in ") == 1
    assert "tokenized" not in caplog.text
    assert (f"train: waiting up to 120 s (data.token_cache_wait_s) for the token cache "
            f"{cached.path}, which {socket.gethostname()} pid {writer.pid} is writing"
            ) in caplog.text
    assert f"train: reading token ids from {cached.path}" in caplog.text
    assert cached.read_ids([1199])[1].tolist() == [tok.encode(PAIRS[1199][1])]


def test_a_killed_writer_leaves_nothing_that_is_read(tmp_path, vocab, caplog):
    tok = vocab[200]
    writer = slow_writer(tok, tmp_path)
    tokens = tmp_path / "vocab" / "tokens"
    wait_for_partial(writer, tokens)
    time.sleep(0.3)  # a few chunks written
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    (partial,) = tokens.glob("*.partial")
    assert partial.exists() and not list(tokens.glob("*.array_record"))
    with caplog.at_level(logging.INFO):
        cached = cache_of(tmp_path, tok)  # written anew; the partial file is removed
    assert "waiting" not in caplog.text  # the killed writer's lock went with it
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
    # A process that waits for another's lock longer than data.token_cache_wait_s
    # tokenizes on the fly (the lock is held here, on a file descriptor of its own).
    other = token_cache.cache_path(tmp_path / "none" / "vocab" / "tokens", "train",
                                   token_cache.cache_key(tok, PAIRS, "en", "de"))
    with locks.Lock(other):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert cache_of(tmp_path / "none", tok, wait_s=1.5) is None
    assert (f"train: the token cache {other} was not written within "
            "data.token_cache_wait_s=1.5 s; tokenizing on the fly") in caplog.text
    # Where the cache cannot be written (here a file stands where its folder would), the
    # pairs are tokenized on the fly.
    (tmp_path / "ro" / "vocab").mkdir(parents=True)
    (tmp_path / "ro" / "vocab" / "tokens").write_text("")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cache_of(tmp_path / "ro", tok) is None
    assert "cannot write the token cache" in caplog.text and "tokenizing on the fly" in \
        caplog.text


def text_run_config(tmp_path):
    """A run on text files of 600 training and 100 validation pairs."""
    lines = [f"{corpus.detokenize(en)}\t{corpus.detokenize(de)}" for en, de in PAIRS[:700]]
    (tmp_path / "train.tsv").write_text("\n".join(lines[:600]) + "\n")
    (tmp_path / "dev.tsv").write_text("\n".join(lines[600:]) + "\n")
    c = config_lib.build("base", "text")
    c.data.update(train_files=str(tmp_path / "train.tsv"), eval_files=str(tmp_path / "dev.tsv"),
                  vocab_size=200, vocab_sample=100_000, max_len=64, row_len=64,
                  tokens_per_batch=8 * 64)
    c.train.update(bleu_sentences=0, samples=0)
    return c


def data_for(config, workdir):
    return pipeline.data_for(config, workdir, num_devices=1, process_index=0, process_count=1)


def test_the_points_of_a_sweep_share_one_cache_at_its_root(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(batching, "READ_THREADS", 0)
    c = text_run_config(tmp_path)
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "sweep.json").write_text("{}")  # what makes a folder a sweep root
    with caplog.at_level(logging.INFO):
        first = data_for(c, root / "a")
    assert caplog.text.count(" once: ") == 2  # the training and validation splits
    # The sweep shares the vocabulary with its next point (sweeps/vocab.py), which reads
    # the ids the first point wrote instead of tokenizing them again.
    (root / "b" / "vocab").mkdir(parents=True)
    shutil.copy(root / "a" / "vocab" / "spm.model", root / "b" / "vocab" / "spm.model")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = data_for(c, root / "b")
    assert " once: " not in caplog.text
    assert caplog.text.count(f"reading token ids from {root / 'tokens'}") == 2
    assert sorted(p.name.split("-")[0] for p in (root / "tokens").glob("*.array_record")) == [
        "train", "validation"]
    assert not (root / "a" / "vocab" / "tokens").exists()
    assert_same(batches(first.train, 4), batches(second.train, 4))
    # A run outside a sweep keeps its cache beside its vocabulary; data.token_cache_dir
    # puts it where runs of other workdirs find it.
    data_for(c, tmp_path / "lone")
    assert len(list((tmp_path / "lone" / "vocab" / "tokens").glob("*.array_record"))) == 2
    c.data.token_cache_dir = str(tmp_path / "shared")
    shutil.copytree(tmp_path / "lone" / "vocab", tmp_path / "other" / "vocab",
                    ignore=shutil.ignore_patterns("tokens"))
    data_for(c, tmp_path / "other")
    assert len(list((tmp_path / "shared").glob("*.array_record"))) == 2


def test_a_cache_in_a_bucket_is_written_once_and_read_into_the_same_batches(
        bucket, vocab, caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_JAX_CACHE", str(tmp_path / "host"))
    tok = vocab[200]
    workdir = f"{bucket}/run"
    tokens = storage.path(f"{workdir}/vocab/tokens")
    with caplog.at_level(logging.INFO):
        cached = cache_of(workdir, tok)
    (written,) = [p for p in tokens.iterdir() if p.name.endswith(".array_record")]
    assert written.name.startswith("train-")
    assert caplog.text.count(" once: 1200 pairs") == 1
    assert not locks.lock_path(written).exists()  # released
    # Read from this host's copy, made once, byte for byte the bucket's.
    copy = tmp_path / "host" / "tokens" / written.name
    assert cached.path == str(copy) and copy.read_bytes() == written.read_bytes()
    assert caplog.text.count(f"token cache copied to {copy}") == 1
    caplog.clear()
    with caplog.at_level(logging.INFO):
        again = cache_of(workdir, tok)
    assert " once: " not in caplog.text and f"reading token ids from {written}" in \
        caplog.text and "copied" not in caplog.text and again.path == str(copy)
    # A damaged copy is made again; a host that cannot make one reads the bucket.
    copy.write_bytes(copy.read_bytes()[:100])
    with caplog.at_level(logging.INFO):
        assert cache_of(workdir, tok).path == str(copy)
    assert copy.read_bytes() == written.read_bytes()
    (tmp_path / "blocked").write_text("a file where the copies' folder would go")
    monkeypatch.setenv("TRANSFORMER_JAX_CACHE", str(tmp_path / "blocked"))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        remote = cache_of(workdir, tok)
    assert remote.path == str(written) and caplog.text.count(
        f"reading the token cache {written} from the bucket: no copy on this host") == 1
    assert remote.read_ids([7])[0].tolist() == [tok.encode(PAIRS[7][0])]
    monkeypatch.setenv("TRANSFORMER_JAX_CACHE", str(tmp_path / "host"))
    again = cache_of(workdir, tok)  # (the copy the first one read was damaged above)
    indices = [5, 0, 1199]
    assert again.read_ids(indices)[1].tolist() == [tok.encode(PAIRS[i][1]) for i in indices]

    def run(source):
        return batching.train_data(source, tok, max_len=MAX_LEN, rows=8, seed=1,
                                   chunk_pairs=128)

    assert_same(batches(run(PAIRS), 6), batches(run(again), 6))


@pytest.mark.slow  # two training processes, each compiling its steps (~1 min on 2 cores)
def test_two_processes_of_a_run_in_a_bucket_tokenize_once_and_both_read_the_cache(
        tmp_path, bucket):
    c = text_run_config(tmp_path)  # local text files; the workdir is in the bucket
    workdir = f"{bucket}/run"
    args = [sys.executable, "-m", "transformer_jax.main", "--config=configs/demo.py",
            f"--workdir={workdir}", "--config.data.name=text",
            f"--config.data.train_files={c.data.train_files}",
            f"--config.data.eval_files={c.data.eval_files}",
            f"--config.data.test_files={c.data.eval_files}", "--config.data.vocab_size=200",
            "--config.data.vocab_sample=100000", "--config.data.row_len=64",
            "--config.data.tokens_per_batch=512", "--config.model.num_layers=1",
            "--config.model.d_model=32", "--config.model.d_ff=64",
            "--config.train.num_steps=2", "--config.train.log_every=1",
            "--config.train.eval_every=2", "--config.train.eval_batches=1",
            "--config.train.checkpoint_every=2", "--config.train.bleu_sentences=0",
            "--config.train.samples=0", "--config.train.visualize_sentences=()",
            "--config.train.peak_flops=1e12"]
    copies = tmp_path / "host" / "tokens"
    env = dict(os.environ, JAX_PLATFORMS="cpu", TRANSFORMER_JAX_CACHE=str(tmp_path / "host"),
               XLA_FLAGS="--xla_force_host_platform_device_count=1")
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen(
        [*args, f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2",
         f"--process_id={i}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    logs = [p.communicate(timeout=600)[1] for p in procs]
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-3000:]
    tokens = storage.path(f"{workdir}/vocab/tokens")
    cache = {p.name.split("-")[0]: f"{tokens}/{p.name}" for p in tokens.iterdir()
             if p.name.endswith(".array_record")}
    assert sorted(cache) == ["train", "validation"]
    for split, path in cache.items():
        # Tokenized once, by one process or the other; both read what it wrote.
        assert sum(f"once: {600 if split == 'train' else 100} pairs" in log
                   for log in logs) == 1, split
        assert sum(f"reading token ids from {path}" in log for log in logs) >= 1, split
        # Read from one copy on this host (both processes are on it), made by either.
        copied = [log.count(f"token cache copied to {copies / path.rsplit('/', 1)[1]}")
                  for log in logs]
        assert 1 <= sum(copied) <= 2, (split, copied)
    # Each process saved its data position, in the order computed on the fly.
    for i in range(2):
        state = json.loads(storage.path(
            f"{workdir}/checkpoints/2/data/process_{i}-of-2.json").read_text())
        assert state["order"] == "index_shuffle"
