"""Grids: products, zips and chains of axes expand into the right points, with readable,
unique names; seeds reach initialisation and the order of the training data."""

from pathlib import Path

import jax
import numpy as np
import pytest

from transformer_jax.data import order
from transformer_jax.errors import UserError
from transformer_jax.model.counts import init_params
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.points import point_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_product_has_every_combination_named_after_its_values():
    points = hyper.product([hyper.sweep("optim.lr_scale", [0.5, 1, 2]),
                            hyper.sweep("optim.warmup_steps", [2000, 4000]), hyper.seeds(3)])
    assert len(points) == 3 * 2 * 3
    names = hyper.names(points)
    assert len(set(names)) == 18
    assert names[0] == "lr_scale=0.5,warmup_steps=2000,seed=0"
    assert names[-1] == "lr_scale=2,warmup_steps=4000,seed=2"
    # The first axis varies slowest, the seed fastest.
    assert [p["seed"] for p in points[:4]] == [0, 1, 2, 0]
    assert hyper.setting(points[1], hyper.varying(points)) == "lr_scale=0.5,warmup_steps=2000"


def test_zip_moves_fields_together_and_chain_appends():
    heads = hyper.zip(hyper.sweep("model.num_heads", [4, 8, 16]),
                      hyper.sweep("model.d_k", [32, 16, 8]))
    assert heads == [{"model.num_heads": 4, "model.d_k": 32},
                     {"model.num_heads": 8, "model.d_k": 16},
                     {"model.num_heads": 16, "model.d_k": 8}]
    assert len(hyper.product([heads, hyper.seeds(2)])) == 6
    with pytest.raises(ValueError, match=r"axes of different lengths \[3, 2\]"):
        hyper.zip(hyper.sweep("model.num_heads", [4, 8, 16]), hyper.sweep("model.d_k", [1, 2]))
    both = hyper.chain(hyper.sweep("variant", ["base"]), hyper.sweep("optim.lr_scale", [2.0]))
    assert hyper.names(both) == ["base", "lr_scale=2"]


def test_names_stay_unique_when_fields_share_a_last_name():
    points = hyper.product([hyper.sweep("model.dropout_rate", [0.1, 0.3]),
                            hyper.sweep("model.attention_dropout_rate", [0.0, 0.1])])
    assert hyper.names(points)[1] == "dropout_rate=0.1,attention_dropout_rate=0.1"
    clash = [{"model.max_len": 64, "data.max_len": 32}, {"model.max_len": 128, "data.max_len": 64}]
    assert hyper.names(clash) == ["model.max_len=64,data.max_len=32",
                                  "model.max_len=128,data.max_len=64"]
    with pytest.raises(ValueError, match="points repeat: lr_scale=1"):
        hyper.names(hyper.sweep("optim.lr_scale", [1, 1.0]))
    # A point's own name wins over the one its values would make.
    assert hyper.names([{"name": "mine", "optim.lr_scale": 3}, {"optim.lr_scale": 1}]) == [
        "mine", "lr_scale=1"]
    # A named setting replicated over seeds: each replica its seed, all one setting.
    points = hyper.product([[{"name": "mine", "optim.lr_scale": 3}, {"optim.lr_scale": 1}],
                            hyper.seeds(2)])
    assert hyper.names(points) == ["mine,seed=0", "mine,seed=1", "lr_scale=1,seed=0",
                                   "lr_scale=1,seed=1"]
    fields = hyper.varying(points)
    assert [hyper.setting(p, fields) for p in points] == ["mine", "mine", "lr_scale=1",
                                                          "lr_scale=1"]


def test_command_line_grid_over_a_config_file():
    sweep = load_experiment(
        "configs/table3.py:base", ["optim.lr_scale=0.5,1,2", "optim.warmup_steps=2000,4000"], 3)
    points = sweep.points()
    assert len(points) == 18 and len({p.name for p in points}) == 18
    assert points[1].name == "lr_scale=0.5,warmup_steps=2000,seed=1"
    assert points[1].setting == "lr_scale=0.5,warmup_steps=2000"
    config, own = point_config(sweep, points[-1], "demo")
    assert (config.optim.lr_scale, config.optim.warmup_steps) == (2.0, 4000)
    assert (config.train.seed, config.data.shuffle_seed) == (2, 2)  # the seed sets both
    assert config.scale == "demo" and config.model.d_model == 128
    assert own.optim.lr_scale == 1.0  # the config file's own, for the command's overrides


@pytest.mark.parametrize("grid,message", [
    ("optim.learning_rate=1,2", "unknown config field optim.learning_rate"),
    ("optim.warmup_steps=100,abc", "optim.warmup_steps='abc' is not an int"),
    ("model.share_embeddings=yes", "model.share_embeddings='yes' is not a bool"),
    ("optim.lr_scale", "give FIELD=VALUE,VALUE"),
])
def test_bad_grid_axes_are_refused_naming_the_field(grid, message):
    with pytest.raises(UserError, match=message):
        load_experiment("configs/table3.py:base", [grid])


def test_a_value_out_of_range_is_refused_naming_the_point_and_field():
    sweep = load_experiment("configs/table3.py:base", ["optim.lr_scale=1,-1"])
    with pytest.raises(UserError, match=r"point lr_scale=-1: optim.lr_scale=-1.0 must be"):
        [point_config(sweep, p) for p in sweep.points()]


def test_seeds_reach_initialisation_and_data_order():
    sweep = load_experiment("configs/table3.py:base", seeds=2)
    configs = [point_config(sweep, p, "demo")[0] for p in sweep.points()]
    assert [(c.train.seed, c.data.shuffle_seed) for c in configs] == [(0, 0), (1, 1)]
    from ..helpers import TINY
    params = [init_params(TINY, jax.random.key(c.train.seed)) for c in configs]
    first = [np.asarray(x) for x in jax.tree.leaves(params[0])]
    second = [np.asarray(x) for x in jax.tree.leaves(params[1])]
    assert any(not np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    orders = [list(order.epoch_order(50, c.data.shuffle_seed)) for c in configs]
    assert sorted(orders[0]) == sorted(orders[1]) and orders[0] != orders[1]


def test_seeds_twice_are_refused():
    with pytest.raises(UserError, match="--grid sweep seeds already"):
        load_experiment("configs/table3.py:base", ["seed=0,1"], 3)
