"""Config overrides, as the command line and sweeps give them: any field, any value. Accepted,
the config holds every value asked for, every other field is the named variant's on the
named dataset at the named scale (no label without its model), the model built from it
has those sizes, and config.json written from it reads back as the same config (what a run
records is what it trained); refused, in one ConfigError naming a field given."""

import json
import math

from hypothesis import example, given, strategies as st

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import UserError
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.sweeps import hyper

from . import strategies as gen
from .fuzzing import accepted, examples, outcome


def _same(asked, got) -> bool:
    if isinstance(asked, float) and isinstance(got, float) and math.isnan(asked):
        return math.isnan(got)
    if isinstance(asked, list | tuple):
        return list(asked) == list(got)
    return asked == got and (type(asked) is type(got) or isinstance(got, float))


def _flat(c) -> dict:
    d = json.loads(c.to_json_best_effort())
    return {f"{s}.{k}" if isinstance(v, dict) else s: (v[k] if isinstance(v, dict) else v)
            for s, v in d.items() for k in (v if isinstance(v, dict) else [None])}


def table_config(variant, dataset, scale):
    """The config of the tables; on your own text files, files named (not read here)."""
    c = config_lib.build(variant, dataset, scale)
    if c.data.name == "text":
        c.data.update(train_files="a.en,a.de", eval_files="b.tsv", test_files="c.tsv")
    return c


def check_overrides(arg, overrides, expect=None):
    c = table_config(*arg)
    ok, _ = outcome(lambda: config_lib.validate(config_lib.apply_overrides(c, overrides)),
                    names=[f or "''" for f in overrides], expect=expect)
    if not ok:
        return
    asked = all(_same(v, config_lib.get_field(c, f)) for f, v in overrides.items())
    # Every field not given is the variant's on the dataset at the scale: the label is
    # the model.
    named = _flat(table_config(c.variant, c.data.name, c.scale))
    mine = _flat(c)
    others = all(mine[f] == named[f] for f in named if f not in overrides)
    model = TransformerConfig.from_config(c.model, c.data.vocab_size)
    sizes = all(getattr(model, f) == c.model[f] for f in config_lib.MODEL_FIELDS
                if f not in ("d_k", "d_v", "dtype")) and (model.d_k, model.d_v) == \
        config_lib.derived_dims(c.model)
    recorded = resume.config_from_dict(json.loads(c.to_json_best_effort()), "config.json")
    same_record = json.loads(recorded.to_json_best_effort()) == json.loads(
        c.to_json_best_effort())
    accepted(asked and others and sizes and same_record,
             f"asked {asked}, others the variant's {others}, model sizes {sizes}, "
             f"recorded the same {same_record}")


# The explicit examples' answers, by (config argument, overrides): True applied, False refused.
OVERRIDES_EXPECTED = {
    str((("base", "builtin", "demo"), {"train.seed": 7, "model.num_heads": 2})): True,
    str((("big", "wmt14_ende", "paper"), {"variant": "base"})): False,
    str((("base", "builtin", "demo"), {"train.seed": 2**64})): False,
    str((("A_h1", "builtin", "demo"), {"": 0})): False,
}


@examples(40)
@given(gen.CONFIG_ARGS, gen.overrides())
@example(("base", "builtin", "demo"), {"train.seed": 7, "model.num_heads": 2})  # valid
@example(("big", "wmt14_ende", "paper"), {"variant": "base"})  # the label without the model
@example(("base", "builtin", "demo"), {"scale": "paper"})
@example(("base", "wmt14_ende", "paper"), {"data.defaults_for": "wmt14_enfr"})
@example(("base", "builtin", "demo"), {"data.train_files": "a.tsv"})  # read by nothing
@example(("base", "builtin", "demo"), {"train.seed": 2**64})  # beyond 64 bits
@example(("base", "builtin", "demo"), {"train.seed": 2**32})  # the keys of seed 0
@example(("base", "builtin", "demo"), {"model.max_len": 10**22})
@example(("base", "builtin", "demo"), {"train.num_steps": 2**31})
@example(("base", "builtin", "demo"), {"data.data_dir": "a\x00b"})
@example(("base", "builtin", "demo"), {"model.attention": "local",
                                       "model.attention_dropout_rate": 0.1})
@example(("base", "builtin", "demo"), {"data.name": "wmt14_enfr"})
@example(("A_h1", "builtin", "demo"), {"model.num_layers": {}})  # found: a message of 2 lines
@example(("A_h1", "builtin", "demo"), {"": 0})  # found: a message naming nothing
@example(("base", "builtin", "demo"), {"optim.b1": {".": 1}})  # found: ml_collections' error
# found by the long run: an integer of 54 bits for a float field, held as another number
@example(("A_h1", "builtin", "demo"), {"decode.position_scale": 9_007_199_254_740_993})
@example(("base", "builtin", "demo"), {"optim.lr_scale": 10**400})
def test_any_override_is_applied_whole_or_refused_naming_it(arg, overrides):
    check_overrides(arg, overrides, OVERRIDES_EXPECTED.get(str((arg, overrides))))


@examples(40)
@given(gen.CONFIG_ARGS, st.sampled_from(gen.FIELDS), st.one_of(
    st.sampled_from(gen.WEIRD_TEXT), st.text(max_size=12), st.integers().map(str),
    st.floats().map(repr), st.lists(st.integers(0, 9), max_size=3).map(
        lambda x: ":".join(map(str, x)))))
@example(("base", "builtin", "demo"), "train.seed", "12")  # valid
@example(("base", "builtin", "demo"), "optim.lr_scale", "0.5")  # valid
@example(("base", "builtin", "demo"), "train.seed", "²")
@example(("base", "builtin", "demo"), "train.seed", "١٢")
@example(("base", "builtin", "demo"), "optim.lr_scale", "nan")
def test_any_text_of_the_command_line_is_read_as_the_fields_type_or_refused(arg, field, text):
    """A value as --grid (and --space's choices) read it: the field's type, or refused."""
    current = config_lib.get_field(config_lib.base_config(), field)
    expect = {("train.seed", "12"): True, ("optim.lr_scale", "0.5"): True,
              ("train.seed", "²"): False}.get((field, text))
    ok, value = outcome(lambda: hyper.parse_value(field, text, current, f"--grid={field}"),
                        names=[field], expect=expect)
    if ok:
        accepted(isinstance(value, type(current)) or (
            isinstance(current, tuple) and isinstance(value, tuple)),
            f"{text!r} read as {value!r} for a {type(current).__name__} field")
        if expect:
            assert value == {"12": 12, "0.5": 0.5}[text], f"{text!r} read as {value!r}"
        check_overrides(arg, {field: value})


def cannot_be_a_field(path: str) -> bool:
    """Whether ``--config.PATH`` names no field any config can have, worked out from the
    fields' list: empty, an empty part, or a part below a field that holds a value."""
    parts = path.split(".")
    return not all(p.strip() for p in parts) or any(
        ".".join(parts[:i]) in gen.FIELDS for i in range(1, len(parts)))


OVERRIDE_NAMES = st.one_of(
    st.sampled_from(gen.FIELDS + gen.NOT_FIELDS + ["variant.x", "model.d_model.x", "."]),
    st.builds("{}.{}".format, st.sampled_from(gen.FIELDS + ["model", "train"]),
              st.text(max_size=4)),
    st.text(st.characters(codec="ascii"), max_size=12))


@examples(40)
@given(OVERRIDE_NAMES)
@example("model.d_model")  # a field: valid
@example("model.colour")  # unknown: left to the value's check, which names it
@example("variant.x")  # found: "string indices must be integers, not 'str'"
@example("")  # found: "Could not parse '': SyntaxError(...)"
@example("model..d_model")
@example("\n0")  # found: a message of two lines
def test_any_override_name_is_a_field_or_one_line(path):
    """The name of ``--config.NAME=VALUE``, as the commands check it before ml_collections
    reads it (cli.py): refused naming the flag exactly when no config can have the field;
    else set with the field's own value it reads back equal, or is refused naming it."""
    c = config_lib.base_config()
    ok, _ = outcome(lambda: config_lib.check_name(c, path), names=[f"--config.{path}"],
                    expect=not cannot_be_a_field(path))
    if not ok:
        return
    known = path in gen.FIELDS
    value = config_lib.get_field(c, path) if known else 1
    ok, _ = outcome(lambda: config_lib.set_field(c, path, value), names=[path or "''"],
                    expect=known)
    if ok:
        accepted(config_lib.get_field(c, path) == value)


@examples(20)
@given(gen.CONFIG_ARGS, st.sampled_from(sorted(config_lib.SELECTORS)), st.text(max_size=10))
@example(("base", "builtin", "demo"), "scale", "demo")  # the config's own: valid
@example(("base", "builtin", "demo"), "scale", "paper")
def test_a_field_that_selects_defaults_is_never_changed_alone(arg, field, value):
    """variant, scale and data.defaults_for, given another value than the config's, are
    refused in a line saying how to choose them; never a config labelled one way and built
    another."""
    c = table_config(*arg)
    same = value == config_lib.get_field(c, field)
    ok, e = outcome(lambda: config_lib.apply_overrides(c, {field: value}), names=[field],
                    expect=same)
    if ok:
        accepted(config_lib.get_field(c, field) == value)
    else:
        assert "config argument" in str(e) or "data.name" in str(e)


def test_the_refusal_names_the_config_file_for_json(tmp_path):
    # What workdir_config reads back goes through the same checks, naming the file.
    bad = json.loads(config_lib.base_config().to_json_best_effort())
    bad["train"]["seed"] = 2**40
    try:
        resume.config_from_dict(bad, str(tmp_path / "config.json"))
    except UserError as e:
        assert str(e).startswith(f"{tmp_path / 'config.json'}: train.seed=") and \
            "2**32 - 1" in str(e)
    else:
        raise AssertionError("a 40-bit seed was accepted")
