"""A workdir's metrics and the settings it remembers."""

import json
import logging
import os

import pytest

from transformer_jax.config import resume
from transformer_jax.errors import UserError
from transformer_jax.io import workdirs
from transformer_jax.training import train

from ..helpers import tiny_config


def test_read_metrics_keeps_the_last_line_of_a_step(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("\n".join([
        json.dumps({"split": "train", "step": 50, "loss": 5.0, "tokens_per_s": 900.0}),
        json.dumps({"split": "eval", "step": 50, "loss": 4.0, "perplexity": 40.0}),
        json.dumps({"split": "train", "step": 50, "loss": 4.5, "tokens_per_s": 1000.0}),
        json.dumps({"split": "eval", "step": 50, "bleu": 12.5}),
        '{"split": "train", "st',  # cut short by a killed run
    ]) + "\n")
    metrics = workdirs.read_metrics(tmp_path)
    assert metrics["train"] == {50: {"split": "train", "step": 50, "loss": 4.5,
                                     "tokens_per_s": 1000.0}}
    assert metrics["eval"][50] == {"split": "eval", "step": 50, "loss": 4.0,
                                   "perplexity": 40.0, "bleu": 12.5}
    records = workdirs.read_metric_records(tmp_path)  # every whole line, in order
    assert [(r["split"], r.get("loss")) for r in records] == [
        ("train", 5.0), ("eval", 4.0), ("train", 4.5), ("eval", None)]
    assert workdirs.read_metrics(tmp_path / "missing") == {}


def test_machine_in_words():
    assert workdirs.machine().split("-core ")[0] == str(os.cpu_count())


# ----------------------------------------------------------------------------------------
# The settings a workdir was trained with


def _config_dict(**fields):
    """The tiny config as config.json holds it, with {"section.field": value} changes."""
    config = tiny_config("data")
    for field, value in fields.items():
        section, key = field.split(".")
        config[section][key] = value
    return json.loads(config.to_json_best_effort())


def test_resume_conflicts_name_each_fixed_field_and_both_values():
    saved = _config_dict()
    assert resume.resume_conflicts(saved, _config_dict(**{
        "train.num_steps": 99, "decode.beam_size": 1, "optim.warmup_steps": 7,
        "model.remat": True, "model.block_size": 64, "model.attention": "blockwise"})) == []
    # Where the token ids are read from changes no batch: the token cache's settings.
    assert resume.resume_conflicts(saved, _config_dict(**{
        "data.token_cache": True, "data.token_cache_dir": "/elsewhere",
        "data.token_cache_wait_s": 60.0})) == []
    assert resume.resume_conflicts(saved, _config_dict(**{
        "model.d_model": 256, "data.vocab_size": 300, "data.name": "text",
        "model.attention": "local", "optim.grad_accum_steps": 2})) == [
        "model.d_model: 32 in the workdir, 256 asked",
        "model.attention: 'dense' in the workdir, 'local' asked",
        "data.name: 'builtin' in the workdir, 'text' asked",
        "data.vocab_size: 200 in the workdir, 300 asked",
        "optim.grad_accum_steps: 1 in the workdir, 2 asked"]
    # A field added since the run was saved counts as its default.
    del saved["model"]["num_kv_heads"]
    assert resume.resume_conflicts(saved, _config_dict(**{"model.num_kv_heads": 1})) == [
        "model.num_kv_heads: 0 in the workdir, 1 asked"]
    assert resume.resume_conflicts(saved, _config_dict()) == []


def test_safe_changes_are_recorded_and_config_json_kept(tmp_path):
    original = _config_dict()
    assert resume.remember_config(tmp_path, original, resuming=False) == {}
    (tmp_path / "checkpoints" / "10").mkdir(parents=True)
    longer = _config_dict(**{"train.num_steps": 40, "decode.beam_size": 2})
    assert resume.remember_config(tmp_path, longer, resuming=True) == {
        "train.num_steps": (20, 40), "decode.beam_size": (4, 2)}
    assert resume.remember_config(tmp_path, longer, resuming=True) == {}  # nothing new
    assert resume.remember_config(tmp_path, _config_dict(**{"train.num_steps": 50}),
                                    resuming=True) == {"train.num_steps": (40, 50),
                                                       "decode.beam_size": (2, 4)}
    assert json.loads((tmp_path / "config.json").read_text()) == original
    lines = [json.loads(x) for x in (tmp_path / "config_changes.jsonl").read_text().splitlines()]
    assert [x["changes"] for x in lines] == [
        {"train.num_steps": [20, 40], "decode.beam_size": [4, 2]},
        {"train.num_steps": [40, 50], "decode.beam_size": [2, 4]}]
    saved = workdirs.read_config(tmp_path)
    assert saved["train"]["num_steps"] == 50 and saved["decode"]["beam_size"] == 4
    assert resume.workdir_config(tmp_path).train.num_steps == 50  # what evaluate and translate use
    # Without a checkpoint (a vocabulary only) a model change is a new run; a data one is not.
    (tmp_path / "checkpoints" / "10").rmdir()
    resume.remember_config(tmp_path, _config_dict(**{"model.d_model": 64}), resuming=True)
    with pytest.raises(UserError, match="data.max_len: 32 in the workdir, 64 asked"):
        resume.remember_config(tmp_path, _config_dict(**{"data.max_len": 64}), resuming=True)


@pytest.mark.parametrize("changes,message", [
    ({"model.d_model": 64, "model.num_layers": 2},
     "model.num_layers: 1 in the workdir, 2 asked; model.d_model: 32 in the workdir, 64 asked"),
    ({"data.vocab_size": 300}, "data.vocab_size: 200 in the workdir, 300 asked"),
], ids=["model", "data"])
def test_training_refuses_a_resume_that_changes_the_model_or_data(tmp_path, changes, message):
    resume.remember_config(tmp_path, _config_dict(), resuming=False)
    (tmp_path / "checkpoints" / "10").mkdir(parents=True)
    config = tiny_config("data")  # refused before its data are read
    for field, value in changes.items():
        section, key = field.split(".")
        config[section][key] = value
    with pytest.raises(UserError) as refused:
        train.train_and_evaluate(config, tmp_path)
    assert str(refused.value) == (f"{tmp_path} was trained with other settings: {message}; "
                                  "resume with the workdir's values or train in another "
                                  "--workdir")
    assert not (tmp_path / "hold.json").exists() and not (tmp_path / "vocab").exists()


def test_training_names_a_damaged_config_or_vocabulary(tmp_path, builtin_data_dir):
    config = tiny_config(builtin_data_dir)
    (tmp_path / "vocab").mkdir()
    (tmp_path / "vocab" / "spm.model").write_bytes(b"\x00half a model")
    path = tmp_path / "config.json"
    for damaged, why in [
            ('{"model": {"d_model": 3', r"cut short \(Expecting ',' delimiter at line 1, "
                                        r"column 24\)"),
            ("[1, 2]", "a list, not an object"),
            # found: Python's own int-conversion ValueError of 4,300 digits
            ('{"train": {"seed": ' + "9" * 5000 + "}}",
             r"an integer of 5,000 digits \(at most 40\)"),
            ('{"model": {}, "model": {}}', "the key 'model' is given twice"),
            ('{"optim": {"lr_scale": NaN}}', "NaN is not a number this file holds"),
            ('{"optim": {"lr_scale": 1e999}}', "1e999 overflows a float")]:
        path.write_text(damaged)
        with pytest.raises(UserError, match=rf"^{path}: {why}$"):
            train.train_and_evaluate(config, tmp_path)
    path.write_text(config.to_json_best_effort())
    with pytest.raises(UserError, match=rf"^{tmp_path / 'vocab' / 'spm.model'}: damaged "
                                        "vocabulary, not a SentencePiece model$"):
        train.train_and_evaluate(config, tmp_path)
    assert not (tmp_path / "hold.json").exists()


def test_final_metrics_of_an_older_run_keep_its_token_count(tmp_path, caplog):
    """Runs before 2026-12-03 wrote the validation's target tokens as a float (15994.0): read
    as the count it is. A fraction there is not a count and is left out, named."""
    final = {"step": 300, "perplexity": 1.7, "tokens": 15994.0}
    (tmp_path / "final_metrics.json").write_text(json.dumps(final))
    with caplog.at_level(logging.WARNING):
        read = workdirs.read_final(tmp_path)
    assert read == {"step": 300, "perplexity": 1.7, "tokens": 15994}
    assert type(read["tokens"]) is int and not caplog.records
    (tmp_path / "final_metrics.json").write_text(json.dumps({**final, "tokens": 15994.5}))
    with caplog.at_level(logging.WARNING):
        assert workdirs.read_final(tmp_path) == {"step": 300, "perplexity": 1.7}
    assert "left out tokens=" in caplog.text
