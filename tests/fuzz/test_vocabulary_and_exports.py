"""The vocabulary loader, the exports and the MarianMT import (``export --from_hf``): a
vocabulary file of any bytes at any kind of path, a workdir's edited model exported, a
MarianMT directory whose config.json says anything. Accepted, the vocabulary has the
project's special pieces, the export is written whole, the imported workdir holds the model
its config.json describes, with the weights of the run that was exported; refused, in one
UserError naming the file or the field."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from transformer_jax import exports
from transformer_jax.data.tokenizer import EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer
from transformer_jax.evaluation import restore
from transformer_jax.exports import from_hf, hf
from transformer_jax.io import layout
from transformer_jax.model import kernels

from ..conftest import once_per_session
from ..helpers import workdir_spec
from . import strategies as gen
from .fuzzing import accepted, examples, outcome

VOCAB = Path(layout.VOCAB) / layout.VOCAB_MODEL


@pytest.fixture(scope="module")
def other_vocabulary(tmp_path_factory):
    """A SentencePiece model with SentencePiece's own special ids (unknown 0, start 1,
    end 2): another tool's vocabulary."""
    import io

    import sentencepiece as spm

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c hello world"] * 40),
                                   model_writer=buffer, vocab_size=15, minloglevel=2)
    return buffer.getvalue()


@examples(40)
@given(st.data(), st.sampled_from(["file", "file", "file", "named pipe", "directory",
                                   "missing"]))
@example("as written", "file")  # the run's own: valid
@example("empty", "file")  # found: 0 pieces, translating into nothing
@example("other", "file")  # another tool's special ids
@example("small", "file")  # a 60-piece vocabulary
def test_any_vocabulary_file_loads_with_our_special_pieces_or_one_line(
        trained_workdir, other_vocabulary, data, kind):
    real = (trained_workdir / VOCAB).read_bytes()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "spm.model"
        if data == "small":
            train_tokenizer(["the small dog sees the old house ."] * 30, 60, path)
        elif kind == "named pipe":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "file":
            named = {"empty": b"", "other": other_vocabulary, "as written": real}
            raw = named.get(data) if isinstance(data, str) else data.draw(
                st.one_of(gen.damaged_bytes(real), st.just(real)))
            path.write_bytes(raw)
        ok, tokenizer = outcome(lambda: Tokenizer(path), names=[str(path)], expect={
            "as written": True, "empty": False, "other": False}.get(str(data)))
        if ok:
            ids = tokenizer.encode("the small dog sees the old house .")
            accepted(tokenizer.vocab_size >= 3 and (tokenizer.sp.pad_id(), tokenizer.sp.eos_id(),
                                                    tokenizer.sp.unk_id()) == (
                PAD_ID, EOS_ID, UNK_ID) and ids[-1] == EOS_ID
                and isinstance(tokenizer.decode(ids), str))


@examples(20)
@given(st.lists(st.one_of(st.integers(-3, 260), st.sampled_from([2**31, -(2**31), 10**20])),
                max_size=12))
@example([5, 6, 7])  # valid
@example([5, 250, 7])  # found: IndexError "piece id is out of range" from sentencepiece
@example([-1])
def test_any_ids_decode_to_text_or_one_line(trained_workdir, ids):
    """Ids as a model of another vocabulary would give them: text, or a DataError naming the
    vocabulary file, never sentencepiece's IndexError."""
    tokenizer = Tokenizer(trained_workdir / VOCAB)
    fits = all(0 <= i < tokenizer.vocab_size for i in ids)
    ok, read = outcome(lambda: (tokenizer.decode(ids), tokenizer.pieces(ids)),
                       names=[str(tokenizer.path)], expect=fits)
    if ok:
        accepted(isinstance(read[0], str) and len(read[1]) == len(ids))


@pytest.fixture(scope="session")
def marian(trained_workdir, tmp_path_factory):
    """The tiny trained model exported as a MarianMT directory, once a session."""
    def make(directory):
        exports.export("hf", trained_workdir, workdir_spec(trained_workdir),
                       directory / "marian", average=1)

    return once_per_session(tmp_path_factory, "fuzz_marian", make) / "marian"


SIZE_VALUES = st.one_of(st.sampled_from([0, -1, 1, 2, 3, 16, 32, 31, 2**31, 2**40]),
                        st.sampled_from(["32", 32.0, True, None, [32], {}]))


def same_weights(imported, trained_workdir) -> str:
    """Where the imported model's parameters differ from those of the run that was exported
    (its last checkpoint, as the export took it), or "" where every array is the same: an
    import that reads config.json right but maps, transposes or drops a weight fails here."""
    ours = restore.load_workdir(trained_workdir, workdir_spec(trained_workdir), 1)
    flat = dict(jax.tree_util.tree_flatten_with_path(ours.params)[0])
    got = dict(jax.tree_util.tree_flatten_with_path(imported.params)[0])
    if flat.keys() != got.keys():
        return f"parameter names differ: {sorted(map(str, flat.keys() ^ got.keys()))[:4]}"
    for key, value in flat.items():
        if np.shape(value) != np.shape(got[key]) or not np.allclose(value, got[key],
                                                                     rtol=0, atol=1e-6):
            return f"{jax.tree_util.keystr(key)} differs from the exported run's"
    return ""


@examples(4)  # each writes a workdir and a checkpoint
@given(st.data())
@example({"encoder_attention_heads": 0, "decoder_attention_heads": 0})  # found: / 0
@example({"d_model": "32"})  # found: a TypeError
@example({"vocab_size": None})  # found: a missing field, a KeyError
@example({})  # as exported: imported whole
@example({"max_position_embeddings": 16})  # found: a model from elsewhere of 16 positions
def test_any_marian_config_imports_its_model_or_one_line(marian, trained_workdir, data):
    config = json.loads((marian / hf.CONFIG).read_text())
    foreign = data == {"max_position_embeddings": 16}
    if isinstance(data, dict):
        changes = data
    elif data.draw(st.booleans()):  # a change the weights allow: a longer or shorter table
        changes = {"max_position_embeddings": data.draw(st.integers(1, 4096))}
        foreign = data.draw(st.booleans())  # a MarianMT model from elsewhere: no run config
    else:
        fields = data.draw(st.lists(st.sampled_from(sorted(from_hf.SIZES) + ["pad_token_id",
                                                                      "activation_function"]),
                                    min_size=1, max_size=2, unique=True))
        changes = {f: data.draw(SIZE_VALUES) for f in fields}
    edited = {**config, **changes}
    edited = {k: v for k, v in edited.items() if v is not None}  # None: the field missing
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "marian"
        shutil.copytree(marian, source)
        (source / hf.CONFIG).write_text(json.dumps(edited))
        if foreign:
            (source / hf.RUN_CONFIG).unlink()
        out = Path(directory) / "imported"
        ok, _ = outcome(lambda: from_hf.import_directory(str(source), out),
                        names=[str(source)], expect={"{}": True, str({
                            "encoder_attention_heads": 0, "decoder_attention_heads": 0}): False,
                            str({"d_model": "32"}): False}.get(str(data)))
        if not ok:
            assert not out.exists()  # nothing half written
            return
        loaded = restore.load_workdir(out, workdir_spec(out), 1)
        m = loaded.model_config
        differs = same_weights(loaded, trained_workdir)
        accepted((m.d_model, m.num_heads, m.num_layers, m.d_ff, m.vocab_size, m.max_len) == (
            edited["d_model"], edited["encoder_attention_heads"], edited["encoder_layers"],
            edited["encoder_ffn_dim"], edited["vocab_size"], edited["max_position_embeddings"])
            and not differs, f"imported {m} from {changes} {differs}")


@examples(3)  # each restores a checkpoint
@given(st.sampled_from(["hf", "ctranslate2"]), st.sampled_from(
    ["num_heads", "d_model", "num_layers", "d_ff", "max_len", "positions", "norm", "attention",
     "dropout_rate"]),
    st.one_of(st.sampled_from([1, 2, 8, 64, 128, "learned", "pre", "local", "blockwise", 0.3]),
              gen.ANY_SCALAR))
@example("hf", "num_heads", 2)  # the model of config.json is not the checkpoint's
@example("ctranslate2", "max_len", 128)  # found: exported, another table of the same shapes
@example("hf", "attention", "blockwise")  # the same numbers another way: exported
def test_an_edited_workdir_exports_whole_or_one_line(trained_workdir, target, field, value):
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory) / "run"
        shutil.copytree(trained_workdir, workdir, ignore=shutil.ignore_patterns(
            layout.TENSORBOARD))
        saved = json.loads((workdir / layout.CONFIG).read_text())
        was = saved["model"][field]
        saved["model"][field] = value
        (workdir / layout.CONFIG).write_text(json.dumps(saved))
        out = Path(directory) / "out"
        ok, _ = outcome(lambda: exports.export(target, workdir, workdir_spec(workdir), out,
                                               average=1),
                        names=[str(workdir)], expect={("hf", "num_heads", 2): False, (
                            "hf", "attention", "blockwise"): True}.get((target, field, value)))
        if ok:  # only a model the checkpoint's computes the same: the rule of a resume
            accepted(out.is_dir() and any(out.iterdir()) and (value == was or (
                field == "attention" and {value, was} <= set(kernels.having("exact")))),
                f"exported with model.{field}={value!r}, trained with {was!r}")
        else:
            assert not out.exists()


RUN_MODEL_EDITS = {"norm": ["pre", "post"], "positions": ["learned", "rotary", "sinusoidal"],
                   "attention": ["local", "blockwise", "dense"], "num_kv_heads": [0, 1, 2],
                   "d_k": [0, 4, 16], "dropout_rate": [0.0, 0.3],
                   "share_embeddings": [False, True], "max_len": [16, 64]}


@examples(4)  # each writes a workdir and restores its checkpoint
@given(st.sampled_from(sorted(RUN_MODEL_EDITS)), st.data())
@example("norm", "pre")  # found: imported, and computed as pre-LN on post-LN weights
@example("positions", "rotary")  # found: imported, and computed without the weights' table
@example("dropout_rate", 0.3)  # training's alone: imported as the config says
def test_an_exported_runs_config_edited_imports_its_model_or_one_line(marian, trained_workdir,
                                                                      field, data):
    """The exported run's own config (transformer_jax_config.json) edited: imported only
    when its model is the one MarianMT's config.json and weights describe."""
    value = data if isinstance(data, str | bool | int | float) else data.draw(
        st.sampled_from(RUN_MODEL_EDITS[field]))
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / "marian"
        shutil.copytree(marian, source)
        run = json.loads((source / hf.RUN_CONFIG).read_text())
        run["model"][field] = value
        (source / hf.RUN_CONFIG).write_text(json.dumps(run))
        out = Path(directory) / "imported"
        ok, _ = outcome(lambda: from_hf.import_directory(str(source), out),
                        names=[str(source / hf.RUN_CONFIG)], expect={
                            ("norm", "pre"): False, ("dropout_rate", 0.3): True}.get((field, data)))
        if not ok:
            assert not out.exists()
            return
        loaded = restore.load_workdir(out, workdir_spec(out), 1)
        m = loaded.model_config
        differs = same_weights(loaded, trained_workdir)
        marian_config = json.loads((source / hf.CONFIG).read_text())
        accepted((m.norm, m.positions, m.share_embeddings, m.kv_heads, m.d_k, m.max_len) == (
            "post", "sinusoidal", True, marian_config["encoder_attention_heads"],
            marian_config["d_model"] // marian_config["encoder_attention_heads"],
            marian_config["max_position_embeddings"])
            and m.attention in kernels.having("exact") and not differs,
            f"imported {m} with {field}={value!r} {differs}")
