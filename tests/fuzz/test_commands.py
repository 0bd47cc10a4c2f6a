"""Each command given bad input, as a user would give it, in a process of its own: it ends
with exit status 2 and one line, ``error: ...`` naming the problem, and no traceback."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def command(name, *args, timeout=180):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("TRANSFORMER_JAX_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", f"transformer_jax.{name}", *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def refused(ran, *words):
    """Exit status 2, no traceback, and a last line ``error: ...`` holding ``words``."""
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    last = ran.stderr.strip().splitlines()[-1] if ran.stderr.strip() else ""
    assert ran.returncode == 2, (ran.returncode, ran.stderr[-2000:])
    assert last.startswith("error: ") and all(w in last for w in words), last


@pytest.fixture
def none_config(tmp_path):
    path = tmp_path / "none.py"
    path.write_text("def get_config(arg=None):\n    pass\n")
    return path


@pytest.mark.parametrize("args,words", [
    (["--config=configs/demo.py", "--config.variant=big"],
     ["--config.variant='big' would change the label", "configs/base.py:big"]),
    (["--config=configs/demo.py", "--flagfile=no/such/flags.txt"], ["--flagfile", "no/such"]),
    (["--config=configs/demo.py", "--config.train.seed=18446744073709551616"],
     ["train.seed=18446744073709551616 must be at most 4,294,967,295"]),
    (["--config=configs/demo.py", "--config.data.train_files=a.tsv"],
     ["data.train_files='a.tsv'", "data.name='builtin' reads no text files"]),
    (["--config=configs/demo.py", "--config.train.devices=64"],
     ["train.devices=64 but this process has", "device(s)"]),
])
@pytest.mark.slow
def test_main_refuses_what_would_train_another_model(tmp_path, args, words):
    refused(command("main", *args, f"--workdir={tmp_path / 'run'}"), *words)
    assert not (tmp_path / "run").exists()  # nothing written


def test_main_refuses_an_empty_workdir_and_a_config_file_without_a_config(none_config):
    refused(command("main", "--config=configs/demo.py", "--workdir="), "--workdir is empty")
    refused(command("main", f"--config={none_config}", "--workdir=x"),
            f"--config={none_config}: get_config returned None")


def test_a_config_field_of_no_name_and_a_config_file_of_nul_bytes_are_one_line(tmp_path):
    # found: "string indices must be integers, not 'str'", "Could not parse '':
    # SyntaxError(...)" and "source code string cannot contain null bytes", naming nothing
    run = ["--config=configs/demo.py", f"--workdir={tmp_path / 'run'}"]
    refused(command("main", *run, "--config.variant.x=1"),
            "--config.variant.x: unknown config field variant.x (variant holds a value, str, "
            "not a section of fields)")
    refused(command("main", *run, "--config."), "--config.: no field named; give "
                                                "--config.FIELD=VALUE")
    refused(command("evaluate", f"--workdir={tmp_path / 'run'}", "--config.model.d_model.x=1"),
            "--config.model.d_model.x: unknown config field model.d_model.x")
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"from configs.demo import get_config\n\n# \x00\n")
    refused(command("main", f"--config={nul}", f"--workdir={tmp_path / 'run'}"),
            f"--config={nul} line 3: SyntaxError: not Python (it holds NUL bytes)")
    assert sorted(tmp_path.iterdir()) == [nul]  # nothing written


@pytest.mark.slow
def test_main_refuses_a_named_pipe_as_data_instead_of_waiting(tmp_path):
    os.mkfifo(tmp_path / "train.tsv")
    (tmp_path / "dev.tsv").write_text("a\tb\n")
    refused(command("main", "--config=configs/text.py", f"--workdir={tmp_path / 'run'}",
                    f"--config.data.train_files={tmp_path / 'train.tsv'}",
                    f"--config.data.eval_files={tmp_path / 'dev.tsv'}", "--config.train.devices=1",
                    # a model whose checkpoints fit any disk (the free-space check comes first)
                    "--config.model.num_layers=1", "--config.model.d_model=32",
                    "--config.model.d_ff=64", timeout=120),
            "train.tsv is a named pipe, not a regular file")


def test_sweep_refuses_an_unknown_field_and_a_million_seeds(tmp_path):
    refused(command("sweep", "configs/table3.py:base", f"--root={tmp_path}",
                    "--config.nosuch=1"), "unknown config field", "nosuch")
    refused(command("sweep", "configs/table3.py:base", f"--root={tmp_path}",
                    "--seeds=1000000", "--dry_run"), "1,000,000 points", "at most 10,000")


def test_compare_names_a_damaged_sweep_json(tmp_path):
    (tmp_path / "sweep.json").write_text('{"points": [{"name": "../../etc", "variant": "b", '
                                         '"value": 1}]}')
    refused(command("compare", tmp_path), "sweep.json", "points[0].name='../../etc'")


@pytest.fixture
def damaged_workdir(trained_workdir, tmp_path):
    """A copy of the trained workdir, its checkpoints but the last left out."""
    out = tmp_path / "run"
    shutil.copytree(trained_workdir, out, ignore=shutil.ignore_patterns("tb", "10", "20"))
    return out


@pytest.mark.slow
def test_evaluate_translate_and_visualize_name_the_damaged_file(damaged_workdir):
    config = json.loads((damaged_workdir / "config.json").read_text())
    (damaged_workdir / "config.json").write_text(json.dumps({**config, "model": None}))
    refused(command("evaluate", f"--workdir={damaged_workdir}"), "config.json", "model is")
    (damaged_workdir / "config.json").write_text(json.dumps(config))
    vocab = damaged_workdir / "vocab" / "spm.model"
    vocab.unlink()
    os.mkfifo(vocab)
    refused(command("translate", f"--workdir={damaged_workdir}", timeout=120),
            "spm.model: a named pipe")
    vocab.unlink()
    vocab.write_bytes(b"")
    refused(command("visualize", f"--workdir={damaged_workdir}", "--src=a b"),
            "spm.model: not a vocabulary of this project")


def test_a_path_with_a_nul_byte_is_one_line(tmp_path):
    # A --flagfile can carry what a command line cannot. found: ValueError: embedded null byte
    flagfile = tmp_path / "flags.txt"
    flagfile.write_bytes(b"--out=" + str(tmp_path).encode() + b"/a\x00b\n--workdir=x\n")
    refused(command("export", "hf", f"--flagfile={flagfile}"),
            "--out holds a NUL byte, which no path can")
    nested = tmp_path / "nested.txt"
    nested.write_bytes(b"--flagfile=" + str(tmp_path).encode() + b"/a\x00b\n")
    refused(command("translate", f"--flagfile={nested}"), "--flagfile: a path holds a NUL")
    assert sorted(tmp_path.iterdir()) == [flagfile, nested]


def test_an_import_with_no_heads_is_one_line(tmp_path):
    source = tmp_path / "marian"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({
        "d_model": 32, "encoder_attention_heads": 0, "decoder_attention_heads": 0,
        "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64, "vocab_size": 200, "max_position_embeddings": 64,
        "activation_function": "relu", "scale_embedding": True,
        "share_encoder_decoder_embeddings": True, "pad_token_id": 0, "eos_token_id": 1,
        "decoder_start_token_id": 0}))
    refused(command("export", "hf", f"--from_hf={source}", f"--out={tmp_path / 'out'}"),
            "config.json", "encoder_attention_heads=0")


@pytest.mark.slow  # 15 s of one core in make test (2026-12-07)
def test_the_planner_and_a_search_refuse_their_flags_in_one_line(tmp_path):
    refused(command("plan", "--config=configs/demo.py", "--devices=h100:8", "extra"),
            "unexpected arguments: extra")
    refused(command("plan", "--config=configs/demo.py", "--devices=h100:100000x8"),
            "--devices=h100:100000x8: at most 1,024 hosts")
    refused(command("sweep", "configs/table3.py:base", f"--root={tmp_path}", "--dry_run",
                    "--space=optim.lr_scale=log:0.25:4", "--search_seed=-5"),
            "--search_seed=-5 must be an integer in [0, 4,294,967,295]")
    refused(command("main", "--config=configs/demo.py", f"--workdir={tmp_path / 'run'}",
                    f"--heartbeat_timeout_s={2**40}"), "--heartbeat_timeout_s")
    assert not (tmp_path / "run").exists()


def test_params_and_prepare_refuse_in_one_line():
    # 100,000 layers would be traced one by one for hours before a figure is printed.
    refused(command("params", "--config=configs/demo.py", "--config.model.num_layers=100000"),
            "model.num_layers=100000 must be at most 256")
    refused(command("prepare"), "give one dataset name")
    refused(command("prepare", "nosuch"), "'nosuch' is not one of")
