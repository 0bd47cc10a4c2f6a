"""Configs: the paper's values, every Table 3 variant, and one-line refusals of bad values."""

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

import ml_collections
import pytest

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError
from transformer_jax.training import train

from ..helpers import run_command

ROOT = Path(__file__).resolve().parents[2]
TABLE3_VARIANTS = ["base", "A_h1", "A_h4", "A_h16", "A_h32", "B_dk16", "B_dk32", "C_N2", "C_N4",
                   "C_N8", "C_d256", "C_d1024", "C_ff1024", "C_ff4096", "D_drop0", "D_drop02",
                   "D_ls0", "D_ls02", "E_learned", "big"]


def test_base_config_holds_the_papers_values():
    c = config_lib.build("base")
    m = c.model
    assert (m.num_layers, m.d_model, m.d_ff, m.num_heads) == (6, 512, 2048, 8)
    assert config_lib.derived_dims(m) == (64, 64)
    assert m.dropout_rate == 0.1 and c.train.label_smoothing == 0.1
    assert (c.optim.b1, c.optim.b2, c.optim.eps, c.optim.warmup_steps) == (0.9, 0.98, 1e-9, 4000)
    assert c.data.vocab_size == 37000 and c.data.tokens_per_batch == 25000
    assert (c.decode.beam_size, c.decode.alpha, c.decode.max_len_offset) == (4, 0.6, 50)
    assert c.train.num_steps == 100_000 and c.train.keep_checkpoints == 5
    assert m.norm == "post" and m.positions == "sinusoidal" and m.share_embeddings


def test_big_config():
    c = config_lib.build("big")
    assert (c.model.d_model, c.model.d_ff, c.model.num_heads, c.model.dropout_rate) == (
        1024, 4096, 16, 0.3)
    assert c.train.num_steps == 300_000 and c.train.keep_checkpoints == 20
    assert config_lib.build("big", "wmt14_enfr").model.dropout_rate == 0.1


def test_every_table3_variant_is_defined_and_valid():
    assert list(config_lib.VARIANTS) == TABLE3_VARIANTS
    for name in TABLE3_VARIANTS:
        config_lib.validate(config_lib.build(name))


@pytest.mark.parametrize("name,heads,d_k", [("A_h1", 1, 512), ("A_h4", 4, 128),
                                            ("base", 8, 64), ("A_h16", 16, 32),
                                            ("A_h32", 32, 16)])
def test_row_a_keeps_h_times_dk_constant(name, heads, d_k):
    m = config_lib.build(name).model
    assert m.num_heads == heads and config_lib.derived_dims(m) == (d_k, d_k)
    assert m.num_heads * config_lib.derived_dims(m)[0] == 512


def test_row_b_changes_dk_alone():
    m = config_lib.build("B_dk16").model
    assert config_lib.derived_dims(m) == (16, 64)


def test_dataset_is_a_field_of_its_own():
    assert config_lib.from_arg("A_h4,dataset=builtin").data.name == "builtin"
    assert config_lib.from_arg("A_h4").data.name == "wmt14_ende"
    enfr = config_lib.build("base", "wmt14_enfr")
    assert (enfr.data.target_lang, enfr.data.vocab_size) == ("fr", 32000)


@pytest.mark.parametrize("path,value,message", [
    ("model.d_model", 0, "model.d_model=0 must be an integer >= 1"),
    ("model.num_heads", 7, "model.num_heads=7 must divide model.d_model=512"),
    ("model.dropout_rate", 1.0, "model.dropout_rate=1.0 must be a number in [0.0, 1.0)"),
    ("train.label_smoothing", -0.1, "train.label_smoothing=-0.1 must be a number"),
    ("model.positions", "alibi", "model.positions='alibi' is not one of"),
    ("data.max_len", 1024, "data.max_len=1024 exceeds model.max_len=512"),
    ("data.row_len", 320, "data.row_len=320 exceeds data.max_len=256"),
    ("data.row_len", -64, "data.row_len=-64 must be an integer >= 0"),
    ("optim.eps", 0.0, "optim.eps=0.0 must be a number in (0.0, inf]"),
    ("train.visualize_sentences", (3, -1), "train.visualize_sentences=(3, -1) must be a tuple"),
])
def test_invalid_values_are_refused_naming_the_field(path, value, message):
    c = config_lib.build("base")
    section, field = path.split(".")
    c[section][field] = value
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        config_lib.validate(c)


def test_num_heads_need_not_divide_d_model_when_dk_and_dv_are_set():
    c = config_lib.build("base")
    c.model.num_heads, c.model.d_k, c.model.d_v = 7, 64, 64
    config_lib.validate(c)


def test_unknown_variant_and_dataset():
    with pytest.raises(ConfigError, match="unknown variant 'A_h3'"):
        config_lib.build("A_h3")
    with pytest.raises(ConfigError, match="unknown dataset 'wmt19'"):
        config_lib.build("base", "wmt19")


@pytest.mark.parametrize("args,message", [
    (["--config=configs/table3.py:A_h3"], "error: unknown variant 'A_h3'"),
    (["--config=configs/base.py", "--config.model.colour=red"],
     "error: unknown config field config.model.colour"),
    (["--config=configs/base.py", "--config.model.num_heads=-1"],
     "error: model.num_heads=-1 must be an integer >= 1"),
    (["--config=configs/base.py", "--config.model.d_model=big"],
     "error: flag --config.model.d_model=big: invalid literal"),
    (["--config=configs/missing.py"], "error: --config: no config file configs/missing.py"),
])
def test_command_line_errors_are_one_line(args, message):
    result = run_command("params", *args)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(message)


def test_attention_kernels_are_switches_on_the_base_model():
    m = config_lib.build("base").model
    assert (m.attention, m.num_kv_heads) == ("dense", 0)  # the paper's
    assert tuple(config_lib.CHOICES["model.attention"]) == (
        "dense", "blockwise", "cudnn", "linear", "local", "local_global", "performer")
    for kernel in config_lib.CHOICES["model.attention"]:
        c = config_lib.build("base")
        c.model.update(attention=kernel, num_kv_heads=2, block_size=128, local_window=32)
        config_lib.validate(c)


@pytest.mark.parametrize("changes,message", [
    (dict(attention="flash"), "model.attention='flash' is not one of dense, blockwise, cudnn, "
     "linear, local, local_global, performer$"),
    (dict(block_size=0), "model.block_size=0 must be an integer >= 1"),
    (dict(local_window=0), "model.local_window=0 must be an integer >= 1"),
    (dict(num_kv_heads=3), "model.num_kv_heads=3 must divide model.num_heads=8"),
    (dict(num_kv_heads=-1), "model.num_kv_heads=-1 must be an integer >= 0"),
    (dict(attention="blockwise", attention_dropout_rate=0.1),
     r"model.attention_dropout_rate=0.1 needs a kernel that supports attention dropout "
     r"\(dense\); the 'blockwise' kernel has none$"),
    (dict(attention="cudnn", d_v=32), "model.attention='cudnn' needs d_k == d_v, got 64 and 32"),
])
def test_attention_fields_are_checked(changes, message):
    c = config_lib.build("base")
    c.model.update(changes)
    with pytest.raises(ConfigError, match=message):
        config_lib.validate(c)


def test_decoding_defaults_are_the_papers_and_bad_values_are_refused():
    d = config_lib.build("base").decode
    assert (d.strategy, d.beam_size, d.alpha, d.max_len_offset) == ("beam", 4, 0.6, 50)
    assert (d.temperature, d.top_k, d.top_p) == (1.0, 0, 1.0)  # sampling filters off
    for path, value, message in [
        ("decode.strategy", "nucleus", "decode.strategy='nucleus' is not one of greedy, beam"),
        ("decode.temperature", -1.0, r"decode.temperature=-1.0 must be a number in \[0.0"),
        ("decode.top_p", 0.0, r"decode.top_p=0.0 must be a number in \(0.0, 1.0\]"),
        ("decode.top_k", -1, "decode.top_k=-1 must be an integer >= 0"),
        ("train.bleu_every", 100, "train.bleu_every=100 needs train.bleu_sentences >= 1"),
    ]:
        c = config_lib.build("base")
        section, field = path.split(".")
        c[section][field] = value
        with pytest.raises(ConfigError, match=message):
            config_lib.validate(c)


def leaf_fields(c, prefix=""):
    """Every field of a config as a dotted path."""
    for key, value in c.items():
        path = f"{prefix}{key}"
        if isinstance(value, ml_collections.ConfigDict):
            yield from leaf_fields(value, f"{path}.")
        else:
            yield path


def set_field(c, path, value):
    node = c
    *sections, field = path.split(".")
    for section in sections:
        node = node[section]
    node[field] = value


def test_every_field_has_a_check():
    checked = (set(config_lib.STRINGS) | set(config_lib.BOOLS) | set(config_lib.INTS)
               | set(config_lib.FLOATS) | set(config_lib.CHOICES) | {"train.visualize_sentences"})
    assert set(leaf_fields(config_lib.build("base"))) == checked


@pytest.mark.parametrize("path", sorted(leaf_fields(config_lib.build("base"))))
def test_every_field_refuses_a_missing_value_naming_itself(path):
    c = config_lib.build("base")
    set_field(c, path, None)  # the one wrong type a config file can always set
    with pytest.raises(ConfigError, match=f"^{re.escape(path)}=None must be |^{re.escape(path)}"
                                          "=None is not one of "):
        config_lib.validate(c)


def out_of_range():
    """(field, a value outside its range, the message) for every integer and float field."""
    for path, low in config_lib.INTS.items():
        yield path, low - 1, f"{path}={low - 1} must be an integer >= {low}"
    for path, (low, high, low_open, high_open) in config_lib.FLOATS.items():
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        below = low if low_open else low - 0.5
        yield path, below, f"{path}={below} must be a number in {interval}"
        if high != math.inf:
            above = high if high_open else high + 0.5
            yield path, above, f"{path}={above} must be a number in {interval}"
        yield path, math.nan, f"{path}=nan must be a number in {interval}"
    for path, choices in config_lib.CHOICES.items():
        yield path, "nonsense", f"{path}='nonsense' is not one of {', '.join(choices)}"


@pytest.mark.parametrize("path,value,message", list(out_of_range()))
def test_every_value_out_of_range_is_refused_naming_the_field_and_the_range(path, value,
                                                                            message):
    c = config_lib.build("base")
    set_field(c, path, value)
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        config_lib.validate(c)


# The ranges themselves, written out: a bound wrong in the tables above is wrong here too.
@pytest.mark.parametrize("path,value,message", [
    ("model.num_layers", 0, "model.num_layers=0 must be an integer >= 1"),
    ("train.keep_checkpoints", 0, "train.keep_checkpoints=0 must be an integer >= 1"),
    ("decode.beam_size", 0, "decode.beam_size=0 must be an integer >= 1"),
    ("data.row_len", -1, "data.row_len=-1 must be an integer >= 0"),
    ("train.seed", -1, "train.seed=-1 must be an integer >= 0"),
    ("decode.max_len_offset", -1, "decode.max_len_offset=-1 must be an integer >= 0"),
    ("model.dropout_rate", 1.0, "model.dropout_rate=1.0 must be a number in [0.0, 1.0)"),
    ("model.dropout_rate", math.nan, "model.dropout_rate=nan must be a number in [0.0, 1.0)"),
    ("train.label_smoothing", -0.5,
     "train.label_smoothing=-0.5 must be a number in [0.0, 1.0)"),
    ("optim.b2", 1.0, "optim.b2=1.0 must be a number in [0.0, 1.0)"),
    ("optim.eps", 0.0, "optim.eps=0.0 must be a number in (0.0, inf]"),
    ("optim.lr_scale", -1.0, "optim.lr_scale=-1.0 must be a number in (0.0, inf]"),
    ("decode.top_p", 1.5, "decode.top_p=1.5 must be a number in (0.0, 1.0]"),
    ("decode.alpha", -0.5, "decode.alpha=-0.5 must be a number in [0.0, inf]"),
    ("train.peak_flops", -1.0, "train.peak_flops=-1.0 must be a number in [0.0, inf]"),
    ("model.norm", "mid", "model.norm='mid' is not one of post, pre"),
    ("model.positions", "alibi", "model.positions='alibi' is not one of sinusoidal, learned, "
                                "rotary"),
    ("model.dtype", "float16", "model.dtype='float16' is not one of float32, bfloat16"),
    ("decode.strategy", "nucleus", "decode.strategy='nucleus' is not one of greedy, beam, "
                                   "sample"),
    ("train.nonfinite", "ignore", "train.nonfinite='ignore' is not one of skip, stop"),
])
def test_ranges_of_representative_fields_written_out(path, value, message):
    c = config_lib.build("base")
    set_field(c, path, value)
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        config_lib.validate(c)


def test_bad_values_are_refused_before_anything_is_compiled(tmp_path):
    c = config_lib.build("base")
    c.train.max_nonfinite_in_a_row = 0
    with pytest.raises(ConfigError, match=r"^train.max_nonfinite_in_a_row=0 must be an integer "
                                          ">= 1$"):
        train.train_and_evaluate(c, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # not even the workdir was made


# ----------------------------------------------------------------------------------------
# One home for experiment definitions: variants, datasets and scales are data


def test_no_code_branches_on_a_variants_name():
    package = ROOT / "transformer_jax"
    for path in [*package.rglob("*.py"), *(ROOT / "configs").glob("*.py")]:
        text = path.read_text()
        assert not re.search(r"variant\s*(==|!=|in)\s*[\"'(\[]", text), path
        assert "_TRAIN_KEYS" not in text, path


def test_variants_are_dotted_overrides_of_any_section():
    assert config_lib.VARIANTS["D_ls0"].overrides == {"train.label_smoothing": 0.0}
    big = config_lib.VARIANTS["big"]
    assert big.overrides["train.num_steps"] == 300_000
    assert big.overrides["train.keep_checkpoints"] == 20
    assert big.datasets == {"wmt14_enfr": {"model.dropout_rate": 0.1}}
    for name, v in config_lib.VARIANTS.items():
        assert (v.row == "") == (name in ("base", "big")), name
        assert not v.row or v.quantity in config_lib.QUANTITIES, name


def test_the_papers_figures_cover_exactly_the_tables_variants():
    from transformer_jax import paper
    assert list(paper.TABLE3) == list(config_lib.VARIANTS)
    # Each row's published figures belong to variants of that row.
    for name, (_, variants) in config_lib.table3_rows().items():
        assert "base" in variants and all(v in paper.TABLE3 for v in variants), name


def test_row_sweeps_are_derived_from_the_table():
    rows = config_lib.table3_rows()
    assert rows["A"] == ("h", ["A_h1", "A_h4", "base", "A_h16", "A_h32"])
    assert rows["B"] == ("d_k", ["B_dk16", "B_dk32", "base"])
    assert rows["C_N"] == ("N", ["C_N2", "C_N4", "base", "C_N8"])
    assert rows["D_ls"] == ("eps_ls", ["D_ls0", "base", "D_ls02"])
    assert rows["E"] == ("positions", ["base", "E_learned"])
    assert sorted(rows) == ["A", "B", "C_N", "C_d", "C_ff", "D_drop", "D_ls", "E"]


def test_configs_table3_lists_the_tables_variants():
    # The one list of the paper's rows (TABLE3_VARIANTS) against what the config file prints.
    result = subprocess.run([sys.executable, "-m", "configs.table3"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-500:]
    lines = [line.split() for line in result.stdout.splitlines()]
    assert [line[0] for line in lines] == TABLE3_VARIANTS
    assert [line[1] for line in lines] == [
        "-" if name in ("base", "big") else name[0] for name in TABLE3_VARIANTS]
    assert " ".join(lines[TABLE3_VARIANTS.index("A_h4")][2:]) == (
        "model.num_heads=4, model.d_k=128, model.d_v=128")


def test_scales_are_data_used_by_the_demo_and_by_sweeps():
    demo = config_lib.build("base", "builtin", "demo")
    assert (demo.model.num_layers, demo.model.d_model, demo.model.d_ff) == (3, 128, 512)
    assert (demo.train.num_steps, demo.data.vocab_size, demo.scale) == (450, 1000, "demo")
    import importlib.util
    spec = importlib.util.spec_from_file_location("demo_config", ROOT / "configs" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mine = module.get_config()
    differs = {k for k, v in mine.model.to_dict().items() if demo.model[k] != v}
    assert differs == {"num_heads"}  # the demo's own choice: 4 heads
    big = config_lib.build("big", "builtin", "demo")
    assert (big.model.d_model, big.model.d_ff, big.train.num_steps) == (256, 1024, 750)
    assert big.model.dropout_rate == 0.1  # the variant's own setting at this scale
    assert config_lib.build("big").model.dropout_rate == 0.3  # the paper's, at its scale
    assert "demo.py" not in (ROOT / "transformer_jax" / "sweep.py").read_text()


@pytest.mark.parametrize("field,key", [("scales", "dmeo"), ("datasets", "wmt14_ende ")])
def test_a_variants_settings_for_an_unknown_scale_or_dataset_are_refused(monkeypatch, field,
                                                                          key):
    # Before, a misspelt key was never looked up: big trained its paper settings in silence.
    big = config_lib.VARIANTS["big"]
    monkeypatch.setitem(config_lib.VARIANTS, "big", dataclasses.replace(
        big, **{field: {**getattr(big, field), key: {"model.dropout_rate": 0.1}}}))
    with pytest.raises(ConfigError) as refused:
        config_lib.build("big", "builtin", "demo")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"variant big: its {field} names {key!r}")
    assert config_lib.build("base", "builtin", "demo").model.dropout_rate == 0.1  # others build


def test_big_on_en_fr_gets_the_papers_en_fr_settings_from_the_command_line():
    big = config_lib.apply_overrides(config_lib.build("big"), {"data.name": "wmt14_enfr"})
    assert (big.model.dropout_rate, big.data.vocab_size, big.data.target_lang) == (0.1, 32000,
                                                                                  "fr")
    assert big.to_dict() == config_lib.build("big", "wmt14_enfr").to_dict()
    # Fields set on the same command line win; back to EN-DE restores big's own P_drop.
    mine = config_lib.apply_overrides(config_lib.build("big"), {
        "data.name": "wmt14_enfr", "data.vocab_size": 16000})
    assert (mine.data.vocab_size, mine.model.dropout_rate) == (16000, 0.1)
    back = config_lib.apply_overrides(mine, {"data.name": "wmt14_ende"})
    assert (back.model.dropout_rate, back.data.target_lang, back.data.vocab_size) == (
        0.3, "de", 16000)
    enfr = run_command("params", "--config=configs/wmt14_enfr.py:big")
    switched = run_command("params", "--config=configs/big.py", "--config.data.name=wmt14_enfr")
    assert switched.returncode == enfr.returncode == 0, switched.stderr[-500:]
    # The same model, vocabulary 32,000 included: the same parameter count.
    assert switched.stdout == enfr.stdout


@pytest.mark.parametrize("overrides,message", [
    ({"model.colour": 1}, "--config: unknown config field model.colour"),
    ({"optim": 1}, "--config: unknown config field optim"),
    ({"model.d_model": "big"}, "--config: model.d_model='big'"),
    ({"data.name": "wmt19"}, "--config: data.name='wmt19' is not one of builtin"),
])
def test_override_errors_name_the_field(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_lib.apply_overrides(config_lib.build("base"), overrides)
