"""The experiment config is read once: the entry points read it into frozen specs
(training/spec.py's TrainingSpec, DataSpec, TransformerConfig, DecodeConfig, a trained
workdir's WorkdirSpec, a sweep point's PointSpec) and the code below them takes the specs.
Every function of the package is read here (its source, not run) and a parameter that takes
the whole experiment config -- annotated ``ConfigDict`` (a section's parameter is named after
its section), or a ``config`` of no type or ``Any`` -- is allowed only where listed below."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from transformer_jax import config as config_lib

PACKAGE = Path(__file__).resolve().parents[1] / "transformer_jax"

# Where the whole config belongs: the config package (which builds, overrides, validates and
# records it in the workdir: config/resume.py), the commands (the layers' top, and cli.py)
# and the sweep's point builder, which makes a config a point and reads it into the point's
# PointSpec, which the rest of sweeps/ takes.
READERS = ("config/", "main.py", "sweep.py", "compare.py", "evaluate.py", "translate.py",
           "visualize.py", "params.py", "plan.py", "prepare.py", "export.py", "cli.py",
           "sweeps/points.py")
# A spec reads its part of the config in its ``from_config`` classmethod, once.
BUILDER = "from_config"
# For callers that hold a config (scripts, tests): each reads it into the specs and calls the
# spec-taking function beside it, which the package calls itself (see the test below).
ADAPTERS = {
    "training/train.py:train_and_evaluate": "train",
    "training/step.py:create_train_state": "initial_state",
    "training/step.py:make_executor": "executor_for",
    "training/step.py:checkpoint_bytes": "state_bytes",
    "training/schedules/__init__.py:schedule_of": "learning_rate",
    "data/pipeline.py:data_for": "data_of",
}
# The schedule registry's own readers: the values of the fields a schedule declares
# (FIELDS), read for OptimSpec.from_config and checked for a sweep's points.
SCHEDULE_READERS = ("training/schedules/__init__.py:settings",
                    "training/schedules/__init__.py:_value",
                    "training/schedules/__init__.py:check")

MODEL = "model/"
SECTIONS = frozenset(config_lib.base_config().keys())
WHOLE = re.compile(r"(?<!Frozen)ConfigDict\b")


def takes_the_config(arg: ast.arg, untyped: bool = True) -> bool:
    """Whether a parameter is the whole experiment config, by its annotation and, with
    ``untyped``, its name."""
    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
    if WHOLE.search(annotation):
        return arg.arg not in SECTIONS
    return untyped and arg.arg == "config" and annotation in ("", "Any", "typing.Any")


def functions(path: Path):
    """(qualified name, node) of every function and method in a module's source."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")

    yield from walk(ast.parse(path.read_text()), "")


def config_takers() -> set[str]:
    """``module:function`` of every function outside READERS with a parameter that takes
    the whole config, builders left out."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(READERS):
            continue
        # The model's modules, below the config in the layers, never see it (they import
        # neither it nor ml_collections, the test below): their ``config`` is the model's
        # TransformerConfig, at times untyped (the registries' entries).
        untyped = not module.startswith(MODEL)
        for name, node in functions(path):
            a = node.args
            if name.rsplit(".", 1)[-1] == BUILDER:
                continue
            if any(takes_the_config(arg, untyped)
                   for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)):
                found.add(f"{module}:{name}")
    return found


def test_the_model_cannot_see_the_experiment_config():
    for path in sorted((PACKAGE / MODEL).rglob("*.py")):
        imported = {alias.name for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Import | ast.ImportFrom)
                    for alias in node.names} | {
            node.module for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module}
        assert not {m for m in imported if m.startswith(("ml_collections",
                                                         "transformer_jax.config"))}, path


def test_no_function_below_the_entry_points_takes_the_whole_config():
    found = config_takers() - set(ADAPTERS) - set(SCHEDULE_READERS)
    assert sorted(found) == [], "take the specs instead of the config"


def test_training_takes_specs_alone():
    """The training package takes specs: its only config readers are the adapters and the
    schedule registry's readers."""
    assert {f for f in config_takers() if f.startswith("training/")} == {
        *(a for a in ADAPTERS if a.startswith("training/")), *SCHEDULE_READERS}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_the_package_calls_the_spec_functions_not_the_adapters(adapter):
    """An adapter is for callers outside the package: inside it, its spec-taking function is
    called, so the config is never read twice."""
    module, name = adapter.split(":")
    assert f"def {ADAPTERS[adapter]}(" in (PACKAGE / module).read_text()
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
                    node.func, "id", None)
                if called == name:
                    callers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert callers == []


def test_the_rule_sees_each_way_of_taking_the_config():
    """The reading above, on source written for it: what counts as the whole config."""
    source = '''
def whole(config: ml_collections.ConfigDict): ...
def plain(config): ...
def loose(config: Any): ...
def many(configs: list[ml_collections.ConfigDict]): ...
def section(search: ml_collections.ConfigDict): ...
def frozen(config: ml_collections.FrozenConfigDict): ...
def spec(config: TransformerConfig): ...
class A:
    def method(self, c: ConfigDict): ...
'''
    tree = ast.parse(source)
    taken = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
             and any(takes_the_config(a) for a in node.args.args)]
    assert taken == ["whole", "plain", "loose", "many", "method"]
