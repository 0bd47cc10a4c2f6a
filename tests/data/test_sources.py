"""Sources: WMT14 read English -> German (TFDS stores de -> en) with newstest2013 to validate
and newstest2014 to test, checked offline with tfds.testing.mock_data; the built-in corpus."""

import importlib
import json

import pytest
import tensorflow_datasets as tfds
import tensorflow_datasets.translate.wmt14  # noqa: F401  (registers wmt14_translate)

from transformer_jax import config as config_lib
from transformer_jax.data import sources
from transformer_jax.errors import DataError
from transformer_jax.training import train

from ..config.test_config import TABLE3_VARIANTS

ende_config = importlib.import_module("configs.wmt14_ende")
enfr_config = importlib.import_module("configs.wmt14_enfr")


@pytest.mark.parametrize("pair", ["de-en", "fr-en"])
def test_tfds_makes_newstest2013_validation_and_newstest2014_test(tmp_path, pair):
    builder = tfds.builder(f"wmt14_translate/{pair}", data_dir=str(tmp_path))
    subsets = {str(k): v for k, v in builder.subsets.items()}
    assert subsets["validation"] == ["newstest2013"]
    assert subsets["test"] == ["newstest2014"]
    assert {"europarl_v7", "commoncrawl", "newscommentary_v9"} <= set(subsets["train"])
    # TFDS's own (supervised) direction is into English: the wrong way round for us.
    assert builder.info.supervised_keys == (pair[:2], "en")


@pytest.mark.parametrize("module,target,tfds_name", [
    (ende_config, "de", "wmt14_translate/de-en"), (enfr_config, "fr", "wmt14_translate/fr-en")])
def test_wmt_sources_read_english_to_the_other_language(module, target, tfds_name):
    data = module.get_config().data
    assert (data.source_lang, data.target_lang) == ("en", target)
    assert config_lib.datasets.get(data.name).tfds_name == tfds_name
    with tfds.testing.mock_data(num_examples=20):
        for split in ("train", "validation", "test"):
            source = sources.get_source(data, split)
            records = tfds.data_source(tfds_name, split=split)  # TFDS's decoded records
            assert len(source) == len(records) == 20
            for i in (0, 7, 19):
                assert source[i] == (records[i]["en"], records[i][target])
                assert source[i][0] != source[i][1]
            assert source.read([19, 0, 7]) == [source[19], source[0], source[7]]


def test_a_language_the_records_lack_is_named():
    data = ende_config.get_config().data
    data.target_lang = "xx"
    with tfds.testing.mock_data(num_examples=3), pytest.raises(
            DataError, match=r"records have the fields de, en, not data.source_lang='en' and "
                             r"data.target_lang='xx'"):
        sources.get_source(data, "train")


def test_an_unprepared_dataset_points_to_the_readme(tmp_path):
    data = ende_config.get_config().data
    data.data_dir = str(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"wmt14_translate/de-en: no array_record copy "
                                                r"of split 'train' .* 'Preparing WMT14'"):
        sources.get_source(data, "train")


@pytest.mark.parametrize("variant", TABLE3_VARIANTS)
def test_wmt14_ende_config_has_every_table3_variant(variant):
    c = ende_config.get_config(variant)
    table3 = importlib.import_module("configs.table3").get_config(variant)
    assert c.to_dict() == table3.to_dict()  # the same experiment, named by its data
    d = c.data
    assert (d.name, d.source_lang, d.target_lang) == ("wmt14_ende", "en", "de")
    assert (d.vocab_size, d.tokens_per_batch) == (37_000, 25_000)
    config_lib.validate(c)


def test_wmt14_enfr_config():
    base, big = enfr_config.get_config(), enfr_config.get_config("big")
    assert (base.data.name, base.data.target_lang, base.data.vocab_size) == (
        "wmt14_enfr", "fr", 32_000)
    assert big.model.dropout_rate == 0.1 and big.model.d_model == 1024  # the paper's EN-FR big
    config_lib.validate(big)


@pytest.mark.slow  # ~50 s on a busy 2-core CPU, mostly compiling the steps
def test_a_short_run_on_mocked_wmt14(tmp_path):
    # configs/wmt14_ende.py end to end (vocabulary, packing, training, evaluation), shrunk.
    c = ende_config.get_config()
    c.data.update(vocab_size=64, vocab_sample=20_000, max_len=64, tokens_per_batch=4 * 64)
    c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4, max_len=64)
    c.train.update(num_steps=2, log_every=1, eval_every=2, eval_batches=1, checkpoint_every=2,
                   devices=1)
    with tfds.testing.mock_data(num_examples=200):
        final = train.train_and_evaluate(c, tmp_path)
    assert final["tokens"] > 0 and final["perplexity"] > 1.0
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["data"]["name"] == "wmt14_ende" and saved["data"]["target_lang"] == "de"


def test_builtin_source_reads_one_and_many(builtin_data_dir):
    c = config_lib.build("base", "builtin")
    c.data.data_dir = str(builtin_data_dir)
    train_source = sources.get_source(c.data, "train")
    assert len(train_source) == 100_000
    assert len(sources.get_source(c.data, "validation")) == 1_000
    assert train_source.read([3, 1, 3]) == [train_source[3], train_source[1], train_source[3]]
    en, de = train_source[0]
    assert en != de and en[0].isupper() and de[0].isupper()


def write_shards(directory, sizes):
    """array_record shards of records b"<shard>:<i>"; their file names."""
    from array_record.python import array_record_module

    names = []
    for shard, size in enumerate(sizes):
        name = str(directory / f"split.array_record-{shard:05d}-of-{len(sizes):05d}")
        writer = array_record_module.ArrayRecordWriter(name, "group_size:1")
        for i in range(size):
            writer.write(f"{shard}:{i}".encode())
        writer.close()
        names.append(name)
    return names


def test_range_reads_cross_shards_and_honour_each_shards_skip(tmp_path):
    # A split of three shards, the first read from its record 2 on and the last up to its
    # record 3 (a sliced split's file instructions): records 0..(5 + 4 + 4) of the split.
    names = write_shards(tmp_path, [7, 4, 6])
    reads = sources.RangeReads([(names[0], 2, 5), (names[1], 0, 4), (names[2], 0, 4)])
    split = [f"0:{i}" for i in range(2, 7)] + [f"1:{i}" for i in range(4)] + \
        [f"2:{i}" for i in range(4)]
    assert [r.decode() for r in reads.read(0, 13)] == split
    for start, stop in [(3, 11), (5, 9), (0, 1), (12, 13), (4, 5), (6, 6)]:
        assert [r.decode() for r in reads.read(start, stop)] == split[start:stop], (start, stop)
    assert [r.decode() for r in reads.read(9, 20)] == split[9:]  # past the end: what is there


def test_consecutive_indices_are_read_in_order_and_others_by_random_access(
        builtin_data_dir):
    source = sources.get_source(sources.SourceSpec("builtin", str(builtin_data_dir)), "train")
    assert source.ranges is not None and sum(t for _, _, t in source.ranges.shards) == len(
        source)
    for indices in ([0, 1, 2, 3], list(range(990, 1010)), [len(source) - 2, len(source) - 1],
                    [5, 3, 4], [10, 12], [7]):
        assert source.read(indices) == [source[i] for i in indices], indices
