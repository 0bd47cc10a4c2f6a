"""Datasets are a registry: one entry a dataset, found by name, read by the reader of its
kind of source. A new dataset is one module on the package path, trained on from the command
line."""

import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds

from transformer_jax import config as config_lib
from transformer_jax.config import datasets
from transformer_jax.data import source_kinds, sources
from transformer_jax.data.tokenizer import Tokenizer, vocab_path
from transformer_jax.errors import ConfigError
from transformer_jax.io import layout, workdirs

from ..helpers import ROOT, run_command, tiny_overrides

# A made-up language pair: every source word has one target word, so a tiny model learns
# it fast. Source words use only the letters "aikmnou", target words only "bdersz".
WORDS = {"ka": "zeb", "mo": "dre", "nu": "sed", "ki": "bez", "ma": "rds", "on": "ebb",
         "ukn": "zz", "om": "red", "ni": "dbe", "au": "srs"}
LETTERS = set("".join(WORDS)) | set("".join(WORDS.values()))
SIZES = {"train": 3000, "validation": 40, "test": 20}


def toy_pairs(split):
    """The toy's pairs of a split: 3 to 8 source words and their target words in order."""
    rng = random.Random(split)
    out = []
    for _ in range(SIZES[split]):
        words = [rng.choice(list(WORDS)) for _ in range(rng.randint(3, 8))]
        out.append((" ".join(words), " ".join(WORDS[w] for w in words)))
    return out


class ToyPairs(tfds.core.GeneratorBasedBuilder):
    """The toy pairs as a TFDS dataset, features named by the toy's languages."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
            {"xs": tfds.features.Text(), "xt": tfds.features.Text()}))

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split) for split in SIZES}

    def _generate_examples(self, split):
        for i, (source, target) in enumerate(toy_pairs(split)):
            yield i, {"xs": source, "xt": target}


# The whole definition of the new dataset: one module of transformer_jax.config.datasets.
TOY_MODULE = '''
from transformer_jax.config.datasets import Dataset

DATASET = Dataset(tfds_name="toy_pairs",
                  settings={"data.source_lang": "xs", "data.target_lang": "xt",
                            "data.vocab_size": 64})
'''


@pytest.mark.slow
def test_a_new_tfds_dataset_is_one_module_and_trains_from_the_command_line(tmp_path):
    tfds_dir = tmp_path / "tfds"
    ToyPairs(data_dir=str(tfds_dir), file_format="array_record").download_and_prepare()
    plugins = tmp_path / "plugins"
    module = plugins / "transformer_jax" / "config" / "datasets" / "toy.py"
    module.parent.mkdir(parents=True)
    module.write_text(TOY_MODULE)
    workdir = tmp_path / "run"
    overrides = tiny_overrides(tfds_dir, **{"train.num_steps": 40, "train.eval_every": 20,
                                            "train.checkpoint_every": 20})
    del overrides["data.name"], overrides["data.vocab_size"]  # the toy's own
    result = subprocess.run(
        [sys.executable, "-m", "transformer_jax.main", "--config=configs/base.py:base,dataset=toy",
         *(f"--config.{k}={v}" for k, v in overrides.items()), f"--workdir={workdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(plugins), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert result.returncode == 0, result.stderr[-3000:]

    saved = json.loads((workdir / layout.CONFIG).read_text())["data"]
    assert (saved["name"], saved["source_lang"], saved["target_lang"], saved["vocab_size"]) == (
        "toy", "xs", "xt", 64)
    losses = {step: r["loss"] for step, r in workdirs.read_metrics(workdir)["train"].items()}
    assert sorted(losses) == list(range(5, 45, 5))
    assert losses[40] < 0.8 * losses[5], losses
    # The vocabulary was trained on the toy's pairs: its pieces are made of the toy's letters
    # (the built-in corpus would bring the whole alphabet), and it has words of both sides.
    tokenizer = Tokenizer(vocab_path(workdir))
    pieces = [p for p in tokenizer.pieces(range(tokenizer.vocab_size))
              if not p.startswith("<")]
    assert set("".join(pieces)) - {"\u2581"} <= LETTERS
    assert {"\u2581zeb", "\u2581ka"} <= set(pieces)
    # This process knows the toy once the same module is registered; the pairs read back are
    # the ones written.
    spec = importlib.util.spec_from_file_location("toy_dataset", module)
    toy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toy)
    datasets.register("toy", toy.DATASET)
    try:
        config = config_lib.validate(config_lib.build("base", "toy"))
        config.data.data_dir = str(tfds_dir)
        for split, size in SIZES.items():
            source = sources.get_source(config.data, split)
            assert len(source) == size
            assert sorted(source.read(range(size))) == sorted(toy_pairs(split))
    finally:
        datasets.REGISTRY.remove("toy")


def test_a_dataset_registered_in_process_is_known_everywhere(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in toy_pairs("validation")))
    files = dict.fromkeys(("data.train_files", "data.eval_files", "data.test_files"),
                          str(pairs))
    datasets.register("mine", datasets.Dataset(
        source="text", rows_from_data=True, splits=datasets.get("text").splits,
        settings={"data.source_lang": "xs", "data.target_lang": "xt", "data.vocab_size": 50,
                  **files}))
    try:
        assert "mine" in config_lib.CHOICES["data.name"]
        c = config_lib.validate(config_lib.from_arg("C_N2,dataset=mine"))
        assert (c.data.name, c.data.vocab_size, c.model.num_layers) == ("mine", 50, 2)
        assert len(sources.get_source(c.data, "train")) == SIZES["validation"]
        # Switching to it by name brings its settings, and back again.
        switched = config_lib.apply_overrides(config_lib.build("base"), {"data.name": "mine"})
        assert (switched.data.target_lang, switched.data.eval_files) == ("xt", str(pairs))
        back = config_lib.apply_overrides(switched, {"data.name": "wmt14_ende"})
        assert (back.data.target_lang, back.data.eval_files) == ("de", "")
    finally:
        datasets.REGISTRY.remove("mine")
    assert "mine" not in config_lib.CHOICES["data.name"]


def test_an_unknown_dataset_is_one_line_naming_the_known_ones():
    known = "builtin, builtin_long, text, wmt14_ende, wmt14_enfr"
    with pytest.raises(ConfigError, match=f"^data.name='wmt19' is not one of {known}$"):
        datasets.get("wmt19")
    c = config_lib.build("base")
    c.data.name = "wmt19"
    with pytest.raises(ConfigError, match=f"^data.name='wmt19' is not one of {known}$"):
        config_lib.validate(c)
    result = run_command("params", "--config=configs/base.py", "--config.data.name=wmt19")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"error: --config: data.name='wmt19' is not one of {known}"]


def test_a_source_kind_without_a_reader_is_refused_naming_the_kinds():
    datasets.register("odd", datasets.Dataset(source="hdf5"))
    try:
        c = config_lib.build("base", "odd")
        with pytest.raises(ConfigError, match="data.name='odd': its source 'hdf5' has no "
                                              "reader; the kinds are tfds, generated, text"):
            sources.get_source(c.data, "train")
    finally:
        datasets.REGISTRY.remove("odd")


def test_a_dataset_module_without_its_entry_is_named(tmp_path, monkeypatch):
    extra = tmp_path / "transformer_jax" / "config" / "datasets"
    extra.mkdir(parents=True)
    (extra / "empty_one.py").write_text("NAME = 'no Dataset here'\n")
    monkeypatch.setattr(datasets, "__path__", [*datasets.__path__, str(extra)])
    monkeypatch.delitem(sys.modules, f"{datasets.__name__}.empty_one", raising=False)
    with pytest.raises(ConfigError, match=r"^data.name='empty_one': .*empty_one.py must define "
                                          r"DATASET = Dataset\(...\)$"):
        datasets.get("empty_one")
    monkeypatch.undo()
    assert "empty_one" not in datasets.DATASETS
    with pytest.raises(ConfigError, match="lack test"):
        datasets.Dataset(splits={"train": "train", "validation": "validation"})


def test_every_dataset_is_read_by_a_reader_and_named_where_tables_name_datasets():
    assert list(datasets.DATASETS) == ["builtin", "builtin_long", "text", "wmt14_ende",
                                       "wmt14_enfr"]
    for name, dataset in datasets.DATASETS.items():
        assert dataset.source in source_kinds.names(), name
        assert tuple(dataset.splits) == datasets.SPLITS, name
        assert bool(dataset.tfds_name) == (dataset.source != "text"), name
    # The built-in corpus's entry names the builder that generates it.
    assert datasets.get("builtin").tfds_name == sources.BuiltinCorpus.name
    # Rows sized to the data: the short sentences of the built-in corpora and of text files.
    assert [n for n, d in datasets.DATASETS.items() if d.rows_from_data] == [
        "builtin", "builtin_long", "text"]
    # Tables keyed by dataset name name known datasets.
    for variant in config_lib.VARIANTS.values():
        assert set(variant.datasets) <= set(datasets.DATASETS)
    for scale in config_lib.SCALES.values():
        assert not scale.dataset or scale.dataset in datasets.DATASETS
    assert datasets.DEFAULT == config_lib.base_config().data.name == "wmt14_ende"
