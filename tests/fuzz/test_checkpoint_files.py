"""A workdir's checkpoints as the commands read them back, damaged or edited: a checkpoint's
metadata, its folder names, its array files cut short, the model of config.json edited
against it, another vocabulary. Accepted, the model restored is the checkpoint's (its
shapes, its parameters); refused, in one UserError naming the checkpoint or the file."""

import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import UserError
from transformer_jax.evaluation import restore
from transformer_jax.io import layout, workdirs
from transformer_jax.model import kernels

from ..helpers import workdir_spec
from . import strategies as gen
from .fuzzing import Traceback, accepted, copy, count, examples, outcome, warnings_logged


@pytest.fixture(scope="module")
def run_spec(trained_workdir):
    return workdir_spec(trained_workdir)


META_FIELDS = ["vocab_size", "step", "nonfinite_steps", "divergence_best", "checksums",
               resume.MODEL_RECORD]


@examples(3)  # each restores a checkpoint (and three explicit examples)
@given(st.data())
@example("as written")
@example("no vocab_size")  # found: a KeyError
@example("garbage")
def test_a_checkpoint_metadata_gives_the_model_or_one_line(trained_workdir, run_spec, data):
    meta_path = Path(layout.CHECKPOINTS) / "30" / "meta" / "metadata"
    meta = json.loads((trained_workdir / meta_path).read_text())
    if data == "as written":
        raw = (trained_workdir / meta_path).read_bytes()
    elif data == "no vocab_size":
        raw = json.dumps({k: v for k, v in meta.items() if k != "vocab_size"}).encode()
    elif data == "garbage":
        raw = b"\x00garbage{"
    elif data.draw(st.booleans()):
        field = data.draw(st.sampled_from(META_FIELDS))
        raw = json.dumps({**meta, field: data.draw(gen.json_values())}).encode()
    else:
        raw = data.draw(gen.json_or_bytes(meta))
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(trained_workdir, directory)
        (workdir / meta_path).write_bytes(raw)
        ok, loaded = outcome(lambda: restore.load_workdir(workdir, run_spec, 1),
                             names=[str(workdir / layout.CHECKPOINTS / "30")],
                             expect={"as written": True, "no vocab_size": False,
                                     "garbage": False}.get(data) if isinstance(data, str)
                             else None)
        if ok:
            accepted(loaded.model_config.vocab_size == loaded.tokenizer.vocab_size
                     == meta["vocab_size"] and loaded.steps == [30])


@examples(10)
@given(st.text(st.characters(categories=("Nd", "No")), min_size=1, max_size=3))
@example("7")  # a step
@example("٢٠")  # Arabic-Indic digits: str.isdigit, but no step orbax writes
@example("²")  # found: int("²") raised
def test_a_checkpoint_folder_named_by_other_digits_is_no_step(trained_workdir, name):
    """A folder named by ASCII digits is a step; one named by other digits is left out (no
    step orbax writes), never read as a step nor a crash."""
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory) / "run"
        (workdir / layout.CHECKPOINTS / name).mkdir(parents=True)
        shutil.copytree(trained_workdir / layout.CHECKPOINTS / "10",
                        workdir / layout.CHECKPOINTS / "10")
        _, steps = outcome(lambda: workdirs.checkpoint_steps_on_disk(workdir),
                           names=[str(workdir)], expect=True)
        if name.isascii():
            accepted(steps == sorted({10, int(name)}), f"{name!r} read as steps {steps}")
        elif steps == [10]:
            count("left out")
        else:
            accepted(False, f"{name!r} read as steps {steps}")


# Model fields and values that keep the parameters' shapes but not what they compute.
SAME_SHAPES = {"norm": ["pre", "post"], "positions": ["rotary", "sinusoidal", "learned"],
               "attention": ["local", "blockwise", "dense", "performer"],
               "dropout_rate": [0.0, 0.3], "local_window": [4, 128], "remat": [True, False],
               "block_size": [128, 256]}


@examples(10)
@given(st.sampled_from(sorted(SAME_SHAPES)), st.data())
@example("attention", "local")  # found: resumed as another kernel, without a word
@example("positions", "rotary")  # found: likewise with positions of another kind
@example("norm", "pre")
@example("remat", True)  # computes the same numbers: may change
def test_a_resume_of_an_edited_model_in_config_json_is_one_line(trained_workdir, field, data):
    """config.json's model edited (same shapes, other computation) and the run resumed as
    config.json says: refused naming the field, the checkpoint and config.json, unless the
    field computes the same numbers (the resume rule's free fields)."""
    value = data if isinstance(data, str | bool | int | float) else data.draw(
        st.sampled_from(SAME_SHAPES[field]))
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory) / "run"
        (workdir / layout.CHECKPOINTS / "30" / "meta").mkdir(parents=True)
        meta = Path(layout.CHECKPOINTS) / "30" / layout.CHECKPOINT_META
        shutil.copyfile(trained_workdir / meta, workdir / meta)
        saved = json.loads((trained_workdir / layout.CONFIG).read_text())
        was = saved["model"][field]
        saved["model"][field] = value
        (workdir / layout.CONFIG).write_text(json.dumps(saved))
        ok, _ = outcome(lambda: resume.remember_config(workdir, saved, resuming=True,
                                                       write=False),
                        names=[str(workdir / layout.CONFIG)],
                        expect={("attention", "local"): False, ("positions", "rotary"): False,
                                ("remat", True): True}.get((field, data)))
        if ok:
            accepted(value == was or f"model.{field}" in resume.FREE_MODEL_FIELDS
                     or (field == "attention" and {value, was} <= set(kernels.having("exact"))),
                     f"resumed with model.{field}={value!r}, trained with {was!r}")


def test_an_edited_model_in_config_json_is_one_line_not_a_shape_error(trained_workdir):
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(trained_workdir, directory)
        saved = json.loads((workdir / layout.CONFIG).read_text())
        saved["model"]["d_model"] = 64
        (workdir / layout.CONFIG).write_text(json.dumps(saved))
        with pytest.raises(UserError, match=rf"^{workdir}/config.json describes another model "
                                            rf"than checkpoint {workdir}/checkpoints/30 was "
                                            r"trained with: model.d_model: 32 in the checkpoint, "
                                            r"64 in config.json \(an edited config.json\? "
                                            r"restore it\)$"):
            restore.load_workdir(workdir, workdir_spec(workdir), 1)
        # A checkpoint written before the model was recorded: its shapes are compared.
        meta = workdir / layout.CHECKPOINTS / "30" / layout.CHECKPOINT_META
        recorded = json.loads(meta.read_text())
        del recorded[resume.MODEL_RECORD]
        meta.write_text(json.dumps(recorded))
        with pytest.raises(UserError, match=r"was written by another model: params/.* has "
                                            r"shape .* \(an edited config.json\?\)"):
            restore.load_workdir(workdir, workdir_spec(workdir), 1)
        assert config_lib.validate(resume.workdir_config(workdir)).model.d_model == 64


@pytest.fixture(scope="module")
def trained_params(trained_workdir, run_spec):
    return restore.load_workdir(trained_workdir, run_spec, 1).params


@pytest.fixture
def unraisable():
    """What reaches sys.unraisablehook while the test runs, every example of it (a read of
    one example may end while the next runs)."""
    seen, hook = [], sys.unraisablehook
    sys.unraisablehook = seen.append
    yield seen
    sys.unraisablehook = hook


@examples(2)  # each restores a checkpoint twice (and three explicit examples)
@given(st.floats(0, 0.9), st.sampled_from(["d", "ocdbt.process_0/d"]))
# found: "RuntimeError: Event loop is closed" with a traceback, once for each read still
# under way, printed after the one-line refusal (asyncio's "Task exception was never
# retrieved" likewise)
@example(1.0, "d")  # nothing cut: restored as trained
@example(0.75, "d")
@example(0.0, "d")
def test_truncated_arrays_are_one_line_and_nothing_after(trained_workdir, run_spec,
                                                         trained_params, unraisable, keep,
                                                         files):
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(trained_workdir, directory)
        checkpoint = workdir / layout.CHECKPOINTS / "30"
        state = checkpoint / "state"
        for f in list(state.glob(f"{files}/*")) or [p for p in state.rglob("*")
                                                     if p.parent.name == "d"]:
            with open(f, "r+b") as handle:
                handle.truncate(int(f.stat().st_size * keep))
        with warnings_logged() as said:
            for _ in range(2):  # as evaluate, translate or export would, or one after another
                ok, loaded = outcome(lambda: restore.load_workdir(workdir, run_spec, 1),
                                     names=[str(checkpoint)],
                                     expect={1.0: True, 0.0: False}.get(keep))
            time.sleep(0.2)  # the reads still under way end
            gc.collect()
        late = [*unraisable, *(w for w in said if "never retrieved" in w)]
        unraisable.clear()
        if late:
            count("traceback")
            raise Traceback(f"printed after the refusal: {late[:3]}")
        if ok:  # the bytes cut were none the arrays read
            accepted(all(np.array_equal(a, b) for a, b in zip(
                jax.tree.leaves(loaded.params), jax.tree.leaves(trained_params), strict=True)),
                "a truncated checkpoint restored as other parameters")


def test_another_vocabulary_is_one_line(trained_workdir, run_spec):
    with tempfile.TemporaryDirectory() as directory:
        workdir = copy(trained_workdir, directory)
        from transformer_jax.data.tokenizer import train_tokenizer

        small = train_tokenizer(["the small dog sees the old house ."] * 30, 60,
                                workdir / VOCAB_FILE)
        with pytest.raises(UserError, match=rf"spm.model has {small.vocab_size} pieces but the "
                                            r"model of .*/30 was trained with 200: the "
                                            "vocabulary is not the run's"):
            restore.load_workdir(workdir, run_spec, 1)


VOCAB_FILE = Path(layout.VOCAB) / layout.VOCAB_MODEL
