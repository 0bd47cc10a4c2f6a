"""What an export refuses, in one line naming the field or file, leaving nothing behind:
variants a target cannot express, a workdir without checkpoints or with a damaged one, an
output directory that exists, a disk too small for the export."""

import os
import shutil

import pytest

from transformer_jax.errors import ConfigError
from transformer_jax.exports import ctranslate2, hf
from transformer_jax.model.spec import TransformerConfig

from .. import needs
from ..helpers import run_command

BASE = TransformerConfig(vocab_size=100, num_layers=1, d_model=32, d_ff=64, num_heads=4,
                         d_k=8, d_v=8)


@pytest.mark.parametrize("target", [ctranslate2, hf])
@pytest.mark.parametrize("change, field", [
    ({"attention": "local"}, "model.attention='local'"),
    ({"attention": "local_global"}, "model.attention='local_global'"),
    ({"attention": "linear"}, "model.attention='linear'"),
    ({"attention": "performer"}, "model.attention='performer'"),
    ({"positions": "rotary"}, "model.positions='rotary'"),
    ({"num_kv_heads": 1}, "model.num_kv_heads=1"),
    ({"d_v": 16}, "model.d_v=16"),
])
def test_both_targets_refuse(target, change, field):
    target.check(BASE)  # the paper's model passes
    with pytest.raises(ConfigError, match=field.replace("(", r"\(")):
        target.check(BASE.replace(**change))


def test_rotary_positions_are_refused_in_one_line_naming_the_tables_the_targets_take():
    with pytest.raises(ConfigError) as raised:
        ctranslate2.check(BASE.replace(positions="rotary"))
    assert str(raised.value) == (
        "model.positions='rotary': CTranslate2 takes a position table added to the "
        "embeddings, not positions inside attention (the export would translate differently; "
        "tables: sinusoidal, learned)")


def test_exact_kernels_pass():
    for kernel in ("blockwise", "dense"):
        ctranslate2.check(BASE.replace(attention=kernel))


@pytest.mark.parametrize("change, field", [
    ({"norm": "pre"}, "model.norm='pre'"),
    ({"positions": "learned"}, "model.positions='learned'"),
    ({"share_embeddings": False}, "model.share_embeddings=False"),
    ({"d_k": 16, "d_v": 16}, "model.d_k=16 x model.num_heads=4"),
])
def test_marian_refuses(change, field):
    with pytest.raises(ConfigError, match=field):
        hf.check(BASE.replace(**change))
    ctranslate2.check(BASE.replace(**change))  # CTranslate2 takes them


def _refused(tmp_path, workdir, out, what):
    ran = run_command("export", "ctranslate2", f"--workdir={workdir}", f"--out={out}")
    assert ran.returncode == 2, ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and what in last, last
    assert not any(p.name.startswith(".out.partial") for p in tmp_path.iterdir())
    return last


def test_workdir_and_output_refusals(trained_workdir, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _refused(tmp_path, trained_workdir, out, "exists already")
    out.rmdir()
    empty = tmp_path / "empty"
    shutil.copytree(trained_workdir, empty, ignore=shutil.ignore_patterns("checkpoints"))
    _refused(tmp_path, empty, out, "no checkpoints")
    assert not out.exists()
    damaged = tmp_path / "damaged"
    shutil.copytree(trained_workdir, damaged)
    steps = sorted((damaged / "checkpoints").iterdir(), key=lambda p: p.name)
    for step in steps:
        for f in (step / "state").rglob("*"):
            if f.is_file() and f.stat().st_size > 1000:
                f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    _refused(tmp_path, damaged, out, "checkpoint")
    assert not out.exists()


def test_an_unknown_target_and_another_targets_flag_are_one_line(tmp_path):
    # Refused before the workdir is read: it need not exist.
    args = [f"--workdir={tmp_path / 'run'}", f"--out={tmp_path / 'out'}"]
    ran = run_command("export", "onnx", *args)
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        "error: export target='onnx' is not one of ctranslate2, hf"]
    ran = run_command("export", "hf", *args, "--quantization=int8")
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        "error: --quantization is for the ctranslate2 target, not hf"]
    assert not (tmp_path / "out").exists()


@pytest.mark.faults
@pytest.mark.parametrize("target", ["ctranslate2", "hf"])
def test_an_export_on_a_full_disk_stops_in_one_line_and_leaves_nothing(trained_workdir,
                                                                         tmp_path, target):
    # --out on a tmpfs of 64 KiB: neither the weights (CTranslate2's model.bin, 120 KiB here,
    # or model.safetensors, 130 KiB, written by safetensors' Rust) nor the SentencePiece
    # model (237 KiB) fit.
    with needs.tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        ran = run_command("export", target, f"--workdir={trained_workdir}",
                          f"--out={disk}/out")
        assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr[-3000:]
        lines = ran.stderr.strip().splitlines()
        assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
        assert lines[-1] == (f"error: --out={disk}/out: no space left on device for the "
                             "export: nothing was written there, its unfinished copy was "
                             "removed; free some space and run the same command again")
        assert os.listdir(disk) == []  # neither out nor the directory it was written in
