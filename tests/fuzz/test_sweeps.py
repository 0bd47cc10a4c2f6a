"""Sweeps and their reports: --grid and --space as typed, --seeds, experiment and config files
of any content, points named by any values, and sweep.json damaged or edited. Accepted, the
points are as many as the grid's product, named uniquely by one folder of the root each,
every value a search may sample is one its field takes, and the report has a row a point;
refused, in one UserError naming the flag, the file or the field."""

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError, UserError
from transformer_jax.sweeps import experiment, hyper, points as points_lib, space
from transformer_jax.sweeps.report import build
from transformer_jax.sweeps.run import run_sweep
from transformer_jax.sweeps.search import run as search
from transformer_jax.sweeps.search.spec import Search

from . import strategies as gen
from .fuzzing import accepted, examples, outcome

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "configs/table3.py:base"
NUMBERS = [f for f in gen.FIELDS if isinstance(config_lib.get_field(
    config_lib.base_config(), f), int | float) and not isinstance(config_lib.get_field(
        config_lib.base_config(), f), bool)]
VALUE_TEXT = st.one_of(st.sampled_from(gen.WEIRD_TEXT), st.integers(-5, 5000).map(str),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr),
                       st.text(st.characters(exclude_characters=",="), max_size=8))


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(ROOT)  # experiments name their config files relative to the repository


def check_points(sweep: experiment.Sweep) -> bool:
    """The sweep's points are named uniquely, each name one folder of the root."""
    named = sweep.points()
    names = [p.name for p in named]
    return len(set(names)) == len(names) == len(sweep.grid) and not any(
        hyper.unfit_name(n) for n in names) and all(
        isinstance(p.variant, str) and p.variant.strip() for p in named)


@examples(30)
@given(st.one_of(st.sampled_from(gen.FIELDS + gen.NOT_FIELDS + ["seed", "variant"]),
                 st.text(max_size=8)),
       st.lists(VALUE_TEXT, min_size=0, max_size=4), st.integers(0, 3))
@example("optim.lr_scale", ["0.5", "1", "2"], 2)  # valid: 6 points
@example("seed", ["²"], 0)  # found: str.isdigit took it, int() did not
@example("variant", ["..", "base"], 0)
@example("optim.lr_scale", ["nan", "inf"], 0)
@example("data.source_lang", ["a/b", "a_b"], 0)  # two values, one name
@example("variant", ["", "big"], 0)  # found: the base model trained as variant ''
@example("variant", [" ", "base"], 0)
def test_any_grid_gives_named_points_or_one_line(field, values, seeds):
    text = f"{field}={','.join(values)}"
    expect = {"optim.lr_scale=0.5,1,2": True, "seed=²": False, "variant=,big": False
              }.get(text)
    ok, sweep = outcome(lambda: experiment.load_experiment(CONFIG, [text], seeds),
                        names=[f"--grid={text}", f"--seeds={seeds}", field,
                               "sweep table3_base:"], expect=expect)
    if ok:
        accepted(check_points(sweep) and len(sweep.grid) == max(1, len(values)) * max(1, seeds)
                 and (not expect or [p.fields["optim.lr_scale"] for p in sweep.points()]
                      == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0]),
                 f"{len(sweep.grid)} points of {text} x {seeds} seeds")


@examples(10)
@given(st.sampled_from([0, 1, 10_000, 10_001, 1_000_000, 10**12]),
       st.integers(1, 3))
@example(10_000, 1)  # valid: the most points a sweep runs
@example(10_000, 2)
def test_seeds_are_counted_before_they_are_made(seeds, axis):
    """--seeds=1000000 is refused at once (it hung, naming points in quadratic time)."""
    grid = ["optim.lr_scale=" + ",".join(str(i + 1) for i in range(axis))]
    ok, sweep = outcome(lambda: experiment.load_experiment(CONFIG, grid, seeds),
                        names=[f"{seeds:,} seeds"],
                        expect=axis * max(seeds, 1) <= experiment.MAX_POINTS)
    if ok:
        accepted(len(sweep.points()) == axis * max(seeds, 1) <= experiment.MAX_POINTS)


@examples(40)
@given(st.sampled_from(NUMBERS + ["model.num_heads", "model.attention", "optim.schedule"]
                       + gen.NOT_FIELDS),
       st.sampled_from(["", "log:", "int:", "int:log:", "float:", "choice:", "cube:"]),
       st.lists(VALUE_TEXT, min_size=1, max_size=3))
@example("optim.lr_scale", "log:", ["0.25", "4"])  # valid
@example("model.num_heads", "choice:", ["4", "8"])  # valid
@example("optim.lr_scale", "log:", ["nan", "4"])  # nan bounds were accepted
@example("model.dropout_rate", "", ["0", "2"])  # a bound outside the field's range
@example("optim.warmup_steps", "int:", ["-5", "600"])
@example("train.seed", "int:", ["0", str(2**40)])
def test_any_space_gives_only_values_its_field_takes_or_one_line(field, kind, parts):
    sep = "," if kind == "choice:" else ":"
    text = f"{field}={kind}{sep.join(parts)}"
    ok, dim = outcome(lambda: space.parse(text), names=[f"--space={text}"], expect={
        "optim.lr_scale=log:0.25:4": True, "model.num_heads=choice:4,8": True,
        "optim.lr_scale=log:nan:4": False, "model.dropout_rate=0:2": False}.get(text))
    if not ok:
        return
    if dim.kind == "choice":
        values = list(dim.choices)
    else:
        low, high = dim.low, dim.high
        values = [low, high, (low + high) / 2, math.sqrt(low * high) if dim.log else low]
        values = [int(round(v)) if dim.kind == "int" else float(v) for v in values]
    fits = True
    for value in values:
        try:
            config_lib.check_value(dim.field, value)
        except ConfigError:
            fits = False
    dim.distribution()  # Optuna takes it
    asked = {"optim.lr_scale=log:0.25:4": (0.25, 4.0, ()),
             "model.num_heads=choice:4,8": (0.0, 0.0, (4, 8))}.get(text)
    accepted(fits and (asked is None or (dim.low, dim.high, dim.choices) == asked),
             f"{text} lets a trial sample a value its field refuses, or read as {dim}")


DEMO_D_MODEL = 128  # configs/table3.py's base at the demo scale (docs/sweeps.md)
HEAD_SPACES = st.one_of(
    st.tuples(st.integers(1, 40), st.integers(1, 40)).filter(lambda b: b[0] < b[1]).map(
        lambda b: f"int:{b[0]}:{b[1]}"),
    st.lists(st.integers(1, 40), min_size=1, max_size=4, unique=True).map(
        lambda v: "choice:" + ",".join(map(str, v))))


@examples(20)
@given(HEAD_SPACES)
@example("choice:2,4,8")  # each divides d_model: valid
@example("int:1:2")
# found: accepted, and the search stopped with an error when it first sampled 3 or 5
@example("int:1:5")
@example("choice:16,24")
def test_a_space_is_refused_before_the_first_trial_where_a_value_cannot_train(spec):
    """A trial of d_model 128 trains only a number of heads that divides it: a space holding
    any other is refused before the first trial (a dry run), naming the field."""
    kind, _, rest = spec.partition(":")
    low, high = (int(b) for b in rest.split(":")) if kind == "int" else (0, 0)
    heads = range(low, high + 1) if kind == "int" else [int(v) for v in rest.split(",")]
    trainable = all(DEMO_D_MODEL % h == 0 for h in heads)
    with tempfile.TemporaryDirectory() as directory:
        sweep = experiment.load_experiment(CONFIG, space=[f"model.num_heads={spec}"])
        ok, result = outcome(lambda: search.run_search(
            sweep, f"{directory}/root", Search("random", 2), scale="demo", dry_run=True),
            names=[f"model.num_heads={spec}"], expect=trainable)
        if ok:
            accepted(result == {} and not os.listdir(directory), "a dry run wrote")


# Experiment files: what get_sweep returns, and files that are not Python at all.
SWEEP_SOURCE = st.sampled_from([
    "Sweep({name!r}, 'configs/table3.py', {grid!r})",
    "Sweep({name!r}, 'configs/table3.py', {grid!r}, overrides={overrides!r})",
    "Sweep({name!r}, {config!r}, {grid!r})",
    "None", "{grid!r}", "'a string'", "Sweep", "[Sweep({name!r}, 'configs/table3.py', [{{}}])]",
    "Sweep({name!r}, 'configs/table3.py', [], space=[1])",
    "Sweep({name!r}, 'configs/table3.py', {grid!r}, space=[space.Dimension("
    "'optim.lr_scale', 'log', float('nan'), 2.0, True)])",
    "1 / 0", "undefined_name", "Sweep({name!r}, 'configs/table3.py', {grid!r}).points()[99]",
])
GRID_VALUES = st.one_of(st.sampled_from(["base", "big", "A_h4", "..", "a/b", "x" * 300]),
                        gen.ANY_SCALAR)
GRIDS = st.lists(st.dictionaries(
    st.sampled_from(["variant", "seed", "name", "optim.lr_scale", "model.num_heads",
                     "train.seed", "model.colour"]), GRID_VALUES, max_size=2),
    min_size=0, max_size=4)


@examples(25)
@given(SWEEP_SOURCE, st.text(max_size=10), GRIDS,
       st.dictionaries(st.sampled_from(gen.FIELDS), gen.ANY_SCALAR, max_size=2),
       st.sampled_from(["configs/table3.py", "configs/nosuch.py", "README.md", 42]),
       st.sampled_from(["python", "bytes", "nul", "syntax"]))
@example("Sweep({name!r}, 'configs/table3.py', {grid!r})", "x",
         [{"variant": "A_h4"}, {"variant": "base"}], {}, "configs/table3.py", "python")  # valid
@example("None", "x", [], {}, "configs/table3.py", "python")  # get_sweep returned None
@example("Sweep({name!r}, 'configs/table3.py', {grid!r})", "../up", [{}], {},
         "configs/table3.py", "python")  # a sweep named out of the root
@example("Sweep({name!r}, 'configs/table3.py', {grid!r})", "x", [{"name": "../../etc"}], {},
         "configs/table3.py", "python")  # a point named out of the root
@example("1 / 0", "x", [], {}, "configs/table3.py", "bytes")
@example("Sweep({name!r}, 'configs/table3.py', {grid!r})", "\n", [{}, {}], {},
         "configs/table3.py", "python")  # refused for its points, before its name is checked
@example("Sweep({name!r}, 'configs/table3.py', {grid!r})", "x", [{"variant": " "}], {},
         "configs/table3.py", "python")  # the base model under no name
def test_any_experiment_file_gives_points_or_one_line(source, name, grid, overrides, config,
                                                     kind):
    body = source.format(name=name, grid=grid, overrides=overrides, config=config)
    code = ("from transformer_jax.sweeps import space\n"
            "from transformer_jax.sweeps.experiment import Sweep\n"
            f"def get_sweep(arg=None):\n    return {body}\n")
    data = {"python": code.encode(), "bytes": b"\xff\xfe" + code.encode("utf-16-le"),
            "nul": code.encode() + b"\x00", "syntax": code.encode()[:-9]}[kind]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "exp.py"
        path.write_bytes(data)
        valid = grid == [{"variant": "A_h4"}, {"variant": "base"}] and kind == "python"
        ok, sweep = outcome(lambda: experiment.load_experiment(str(path)), names=[str(path)],
                            expect=True if valid else False if source == "None" else None)
        if not ok:
            return
        fine = check_points(sweep) and (not valid or [p.variant for p in sweep.points()] == [
            "A_h4", "base"])
        for point in sweep.points()[:2]:  # each point's config: built and checked, or refused
            good, _ = outcome(lambda point=point: points_lib.point_config(sweep, point),
                              names=[f"point {point.name}", str(sweep.config)])
        accepted(fine, f"points of {body} named badly")


# Config files of a sweep: what get_config returns.
CONFIG_SOURCE = st.sampled_from([
    "config_lib.from_arg(arg)", "None", "5", "{{}}", "dict(model=1)",
    "config_lib.from_arg({arg!r})", "1 / 0", "config_lib.base_config().model",
])


@examples(15)
@given(CONFIG_SOURCE, st.sampled_from(["base", "nosuch", "big,dataset=x", "", "a,b=c,d"]))
@example("config_lib.from_arg(arg)", "base")  # valid
@example("None", "base")
def test_any_config_file_of_a_sweep_gives_a_config_or_one_line(source, arg):
    code = ("from transformer_jax import config as config_lib\n"
            f"def get_config(arg=None):\n    return {source.format(arg=arg)}\n")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cfg.py"
        path.write_text(code)
        experiment.config_module.cache_clear()
        sweep = experiment.Sweep("s", str(path), [{}])
        point = sweep.points()[0]
        ok, result = outcome(lambda: points_lib.point_config(sweep, point),
                             names=[str(path), f"point {point.name}"],
                             expect={("config_lib.from_arg(arg)", "base"): True,
                                     ("None", "base"): False}.get((source, arg)))
        if ok:
            config, own = result
            accepted(config.variant == own.variant and config.model == own.model and (
                (source, arg) != ("config_lib.from_arg(arg)", "base")
                or (config.variant, config.model.num_heads) == ("base", 8)))


@pytest.fixture(scope="module")
def swept_root(tmp_path_factory):
    """A sweep.json of three points written by the print launcher (nothing trains)."""
    root = tmp_path_factory.mktemp("sweep") / "root"
    sweep = experiment.Sweep("three", "configs/table3.py",
                             hyper.sweep("variant", ["base", "A_h4", "D_ls0"]))
    os.chdir(ROOT)
    run_sweep(sweep, str(root), "print")
    return root


@examples(15)
@given(st.data())
@example("as written")
@example("climb")  # a point named to climb out of the root
@example("no variant")  # found: a KeyError in the report
def test_any_sweep_json_is_reported_or_one_line(swept_root, data):
    definition = json.loads((swept_root / "sweep.json").read_text())
    if isinstance(data, str):
        if data == "climb":
            definition["points"][0]["name"] = "../../outside"
        elif data == "no variant":
            del definition["points"][1]["variant"]
        raw = json.dumps(definition).encode()
    elif data.draw(st.booleans()):
        raw = json.dumps(data.draw(gen.mutated_json(definition))).encode()
    else:
        raw = data.draw(gen.damaged_bytes(json.dumps(definition).encode()))
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "root"
        shutil.copytree(swept_root, root)
        (root / "sweep.json").write_bytes(raw)
        ok, result = outcome(lambda: build.collect(root),
                             names=[str(root / "sweep.json"), str(root)],
                             expect={"as written": True, "climb": False}.get(str(data)))
        if ok:
            _, rows = result
            names = [r["point"] for r in rows]
            if data == "as written":
                accepted(names == ["base", "A_h4", "D_ls0"], f"report rows {names}")
                return
            inside = all(os.path.realpath(root / n).startswith(os.path.realpath(root) + os.sep)
                         for n in names)
            accepted(inside and len(set(names)) == len(names),
                     f"report rows {names} of a sweep.json holding {raw[:80]!r}")


@examples(40)
@given(st.lists(st.dictionaries(st.sampled_from(["variant", "seed", "name", "a.b", "c"]),
                                GRID_VALUES, max_size=3), min_size=1, max_size=6))
@example([{"variant": "base"}, {"variant": "big", "seed": 1}])  # valid
@example([{"name": ".."}])
@example([{"name": 1}])  # CI's Hypothesis found it: a name not text
@example([{"c": "x/y"}, {"c": "x_y"}])
@example([{"c": "\n"}, {"c": "b"}])
def test_points_get_unique_folder_names_or_one_line(grid):
    valid = grid == [{"variant": "base"}, {"variant": "big", "seed": 1}]
    ok, names = outcome(lambda: _names(grid), names=["point", "points repeat", "name"],
                        expect=True if valid else False if grid == [{"name": ".."}] else None)
    if ok:
        accepted(len(set(names)) == len(names) == len(grid) and not any(
            hyper.unfit_name(n) for n in names) and (not valid or len(names) == 2))


def _names(grid):
    try:
        return hyper.names(grid)
    except ValueError as e:  # the sweep turns it into a UserError naming itself
        raise UserError(str(e)) from None
