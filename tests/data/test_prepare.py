"""Preparing WMT14 through TFDS's real ``wmt14_translate`` builder: statmt's archives, written
here in statmt's formats, are fetched from a local HTTP proxy at the builder's own URLs, then
extracted, parsed and written as array_record by TFDS's code, and read by the training
pipeline. Downloads that fail and files that do not parse leave nothing the reader takes."""

import importlib
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tarfile

import pytest
import tensorflow_datasets as tfds
import tensorflow_datasets.translate.wmt14  # noqa: F401  (registers wmt14_translate)
from tensorflow_datasets.core.download import downloader

from transformer_jax.data import pipeline, prepare, sources, statmt_mirror
from transformer_jax.errors import ConfigError, DataError

from ..needs import require

# TFDS extracts the archives with TensorFlow.
require("tensorflow", "the prepare extra, part of the test extra: pip install -e '.[test]'")

ende_config = importlib.import_module("configs.wmt14_ende")
BUILDER = tfds.builder_cls("wmt14_translate")
DEV_URL = "http://data.statmt.org/wmt19/translation-task/dev.tgz"

_WORDS = [("Haus", "house"), ("Katze", "cat"), ("Baum", "tree"), ("Stadt", "city"),
          ("Fluss", "river"), ("Buch", "book"), ("Weg", "way"), ("Tisch", "table")]


def _pairs(tag, n):
    """``n`` distinct (German, English) pairs, ``tag`` making them distinct across subsets."""
    out = []
    for i in range(n):
        (d1, e1), (d2, e2) = _WORDS[i % 8], _WORDS[(i // 8 + 3) % 8]
        out.append((f"Das {d1} und das {d2} {tag} {i}.", f"The {e1} and the {e2} {tag} {i}."))
    return out


# Europarl holds one pair with an empty side, which TFDS's builder drops.
SUBSETS = {
    "europarl_v7": _pairs("ep", 40) + [("", "A sentence without translation.")],
    "commoncrawl": _pairs("cc", 30),
    "newscommentary_v9": _pairs("nc", 20),
    "newstest2013": _pairs("nt13", 5),
    "newstest2014": _pairs("nt14", 6),
}
COUNTS = {"train": 40 + 30 + 20, "validation": 5, "test": 6}


@pytest.fixture
def archives(tmp_path):
    return statmt_mirror.write_archives(tmp_path / "statmt", ("de", "en"), SUBSETS)


def _records(data_dir, split):
    return tfds.data_source("wmt14_translate/de-en", split=split, data_dir=data_dir,
                            download=False)


def _data_config(data_dir):
    data = ende_config.get_config().data
    data.data_dir = str(data_dir)
    return data


def test_wmt14_ende_is_prepared_by_tfds_real_builder_and_trained_on(tmp_path, archives):
    data_dir = str(tmp_path / "tfds")
    with statmt_mirror.serve(archives, BUILDER) as mirror:
        counts = prepare.prepare("wmt14_ende", data_dir)
    assert counts == COUNTS
    assert mirror.requests == {url: 1 for url in archives}  # each archive fetched once
    for split, subsets in (("train", ["europarl_v7", "commoncrawl", "newscommentary_v9"]),
                           ("validation", ["newstest2013"]), ("test", ["newstest2014"])):
        records = _records(data_dir, split)
        assert len(records) == COUNTS[split]
        assert all(set(r) == {"de", "en"} for r in records)
        written = {(r["de"].decode(), r["en"].decode()) for r in records}
        assert written == {p for s in subsets for p in SUBSETS[s] if p[0]}
    assert ("Das Katze und das Stadt nt14 1.", "The cat and the city nt14 1.") in {
        (r["de"].decode(), r["en"].decode()) for r in _records(data_dir, "test")}
    assert prepare.prepare("wmt14_ende", data_dir) == COUNTS  # prepared: nothing fetched

    # The training side reads it English -> German.
    config = ende_config.get_config()
    config.data.update(data_dir=data_dir, vocab_size=64, vocab_sample=20_000, max_len=32,
                       row_len=32, tokens_per_batch=4 * 32)
    train_source = sources.get_source(config.data, "train")
    assert len(train_source) == COUNTS["train"]
    assert ("The way and the river nc 14.", "Das Weg und das Fluss nc 14.") in {
        train_source[i] for i in range(len(train_source))}
    tok, data, rows, shape, _, *_ = pipeline.data_for(config, tmp_path / "run", num_devices=1,
                                                  process_index=0, process_count=1)
    batch = next(data.iterator)
    assert batch["inputs"].shape == (rows, 32) and rows == 4
    # A target row decodes to the German of some training pair.
    first = batch["targets"][0][batch["targets_segment_ids"][0] == 1]
    assert tok.decode(first) in {
        de for de, _ in SUBSETS["europarl_v7"] + SUBSETS["commoncrawl"]
        + SUBSETS["newscommentary_v9"]}


def test_a_503_ends_in_one_line_nothing_is_read_and_a_rerun_completes(
        tmp_path, archives, monkeypatch):
    monkeypatch.setattr(downloader, "MAX_RETRIES", 1)  # TFDS retries 10 times, ~3 minutes
    data_dir = str(tmp_path / "tfds")
    with statmt_mirror.serve(archives, BUILDER) as mirror:
        mirror.failing.add(DEV_URL)
        with pytest.raises(DataError) as failed:
            prepare.prepare("wmt14_ende", data_dir)
        message = str(failed.value)
        assert "\n" not in message
        assert f"downloading {DEV_URL} failed" in message and "503" in message
        assert message.endswith(
            f"run again: python -m transformer_jax.prepare wmt14_ende --data_dir={data_dir}")
        # The training side refuses it, in one line.
        with pytest.raises(FileNotFoundError, match=r"^wmt14_translate/de-en: no array_record "
                                                    r"copy of split 'train' [^\n]*"
                                                    r"transformer_jax.prepare wmt14_ende"):
            sources.get_source(_data_config(data_dir), "train")
        mirror.failing.clear()
        assert prepare.prepare("wmt14_ende", data_dir) == COUNTS
    # dev.tgz: a try and TFDS's one retry, then the re-run's; the archives that had come are
    # not fetched again.
    assert mirror.requests[DEV_URL] == 3 and all(
        mirror.requests[url] == 1 for url in archives if url != DEV_URL)
    assert len(sources.get_source(_data_config(data_dir), "test")) == COUNTS["test"]


def test_a_file_that_fails_to_parse_leaves_no_partial_dataset(tmp_path, archives):
    # newstest2014's German SGML loses a segment: the builder fails on the test split, after
    # writing train and validation in its unfinished folder.
    _drop_a_german_segment(archives[DEV_URL])
    data_dir = str(tmp_path / "tfds")
    refused = pytest.raises(DataError, match=r"^wmt14_ende: preparing wmt14_translate/de-en "
                                             r"failed, nothing of it was kept: Sizes do not "
                                             r"match: 5 vs 6 [^\n]*newstest2014-deen-src.de.sgm")
    with statmt_mirror.serve(archives, BUILDER), refused:
        prepare.prepare("wmt14_ende", data_dir)
    dataset_dir = os.path.join(data_dir, "wmt14_translate", "de-en")
    assert "1.0.0" not in os.listdir(dataset_dir)
    assert sources.unfinished_preparations("wmt14_translate/de-en", data_dir) == []
    for split in ("train", "validation", "test"):
        with pytest.raises(FileNotFoundError, match="no array_record copy"):
            sources.get_source(_data_config(data_dir), split)
    # Mended, a re-run completes.
    archives = statmt_mirror.write_archives(tmp_path / "statmt", ("de", "en"), SUBSETS)
    with statmt_mirror.serve(archives, BUILDER):
        assert prepare.prepare("wmt14_ende", data_dir) == COUNTS


def _drop_a_german_segment(archive):
    """Rewrites the dev archive without newstest2014's last German segment."""
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(archive, "w:gz") as tar:
        for member, data in members:
            if member.name.endswith("-src.de.sgm"):
                lines = data.decode().splitlines(keepends=True)
                last = max(i for i, line in enumerate(lines) if line.startswith("<seg"))
                data = "".join(lines[:last] + lines[last + 1:]).encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


_PREPARE_IN_CHILD = """
import json, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it: the write would only fail
import tensorflow_datasets as tfds
from transformer_jax.data import prepare, statmt_mirror
archives, data_dir = json.loads(sys.argv[1]), sys.argv[2]
prepare.tfds_dataset("wmt14_ende")
with statmt_mirror.serve(archives, tfds.builder_cls("wmt14_translate")):
    prepare.prepare("wmt14_ende", data_dir)
"""


@pytest.mark.slow  # 17 s of one core in make test (2026-12-07)
def test_a_preparation_killed_while_writing_is_never_read_and_a_rerun_completes(
        tmp_path, archives):
    # The preparing process may write no file larger than the biggest file it extracts:
    # the kernel kills it (SIGXFSZ) as it writes the training split, which holds them all.
    data_dir = str(tmp_path / "tfds")
    with tarfile.open(archives["http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"]
                      ) as tar:
        biggest = max(m.size for m in tar.getmembers())
    limit = 2 * biggest + 4096  # above every download, extracted file and record of info

    def limit_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-c", _PREPARE_IN_CHILD,
         json.dumps({url: str(path) for url, path in archives.items()}), data_dir],
        capture_output=True, text=True, preexec_fn=limit_files,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert done.returncode == -signal.SIGXFSZ, done.stderr[-2000:]
    [left] = sources.unfinished_preparations("wmt14_translate/de-en", data_dir)
    assert any(".array_record-" in f for f in os.listdir(left))  # killed while writing one
    for split in ("train", "test"):
        with pytest.raises(FileNotFoundError, match=(
                rf"^wmt14_translate/de-en: no array_record copy of split '{split}' "
                rf"[^\n]*a preparation did not finish: {re.escape(left)}\)")):
            sources.get_source(_data_config(data_dir), split)
    with statmt_mirror.serve(archives, BUILDER) as mirror:
        assert prepare.prepare("wmt14_ende", data_dir) == COUNTS
    assert mirror.requests == {}  # the child's downloads are kept
    assert sources.unfinished_preparations("wmt14_translate/de-en", data_dir) == []
    assert len(sources.get_source(_data_config(data_dir), "train")) == COUNTS["train"]


def test_a_dataset_without_tfds_preparation_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"dataset 'builtin' has source 'generated', which "
                                          r"needs no preparing; the TFDS datasets are "
                                          r"wmt14_ende, wmt14_enfr"):
        prepare.prepare("builtin")
    with pytest.raises(ConfigError, match=r"dataset='nope' is not one of"):
        prepare.prepare("nope")


def test_the_command_reports_an_archive_that_is_not_statmt_s_in_one_line(tmp_path, archives):
    # In the command's own process the checksums are TFDS's record of statmt's archives: the
    # local europarl archive is not that file.
    data_dir = str(tmp_path / "tfds")
    europarl = "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"
    with statmt_mirror.serve({europarl: archives[europarl]}, BUILDER):
        done = subprocess.run(
            [sys.executable, "-m", "transformer_jax.prepare", "wmt14_ende",
             f"--data_dir={data_dir}"], capture_output=True, text=True, env=os.environ.copy())
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: wmt14_ende: downloading {europarl} failed")
    assert "sha256 is not the one TFDS records" in last and last.endswith(
        f"run again: python -m transformer_jax.prepare wmt14_ende --data_dir={data_dir}")
    assert not os.path.exists(os.path.join(data_dir, "wmt14_translate", "de-en", "1.0.0"))
