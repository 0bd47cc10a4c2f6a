"""The space of a search: dimensions from the command line and from experiment files, their
Optuna distributions, and bad dimensions refused in one line."""

import optuna
import pytest
from absl import app  # noqa: F401 -- its flags defined before the commands run here

from transformer_jax.errors import UserError
from transformer_jax.sweeps import space
from transformer_jax.sweeps.experiment import load_experiment

from ..helpers import ROOT, run_command


@pytest.mark.parametrize("text,distribution", [
    ("optim.lr_scale=log:0.25:4", optuna.distributions.FloatDistribution(0.25, 4.0, log=True)),
    ("model.dropout_rate=0:0.3", optuna.distributions.FloatDistribution(0.0, 0.3)),
    ("config.model.dropout_rate=float:0.1:0.3", optuna.distributions.FloatDistribution(0.1, 0.3)),
    ("optim.warmup_steps=int:100:600", optuna.distributions.IntDistribution(100, 600)),
    ("optim.warmup_steps=int:log:16:4096",
     optuna.distributions.IntDistribution(16, 4096, log=True)),
    ("model.num_heads=choice:4,8,16", optuna.distributions.CategoricalDistribution((4, 8, 16))),
    ("model.positions=choice:sinusoidal,learned",
     optuna.distributions.CategoricalDistribution(("sinusoidal", "learned"))),
])
def test_each_kind_is_its_optuna_distribution(text, distribution):
    dim = space.parse(text)
    assert dim.distribution() == distribution
    assert space.parse(str(dim)) == dim  # written back as it is read


@pytest.mark.parametrize("text,message", [
    ("optim.lr=log:0.25:4", "--space=optim.lr=log:0.25:4: unknown config field optim.lr"),
    ("optim.lr_scale=4:0.25", "--space=optim.lr_scale=4:0.25: low 4 >= high 0.25"),
    ("optim.lr_scale=log:1:1", "low 1 >= high 1"),
    ("optim.lr_scale=log:0:4", "--space=optim.lr_scale=log:0:4: log bounds must be > 0"),
    ("optim.warmup_steps=int:log:-1:5", "log bounds must be > 0"),
    ("model.num_heads=choice:", "--space=model.num_heads=choice:: an empty choice"),
    ("model.num_heads=choice:,", "an empty choice"),
    ("optim.lr_scale=gauss:0:1", "unknown kind 'gauss'; one of float, log, int, choice"),
    ("optim.lr_scale=log:0.25", "give log:LOW:HIGH with two numbers"),
    ("optim.lr_scale", "give FIELD=KIND:..."),
    ("optim.warmup_steps=100:600", "optim.warmup_steps is an int; use int:LOW:HIGH"),
    ("optim.warmup_steps=int:1.5:6", "int bounds must be integers"),
    ("model.positions=0:1", "model.positions is a str, not a number; use choice:"),
    ("model.num_heads=choice:4,eight", "model.num_heads='eight' is not an int"),
])
def test_a_bad_dimension_is_refused_naming_it(text, message):
    with pytest.raises(UserError, match=message.replace("+", r"\+").replace("(", r"\(")):
        space.parse(text)


def test_the_command_refuses_a_bad_space_in_one_line(tmp_path):
    run = run_command("sweep", "configs/table3.py:base", f"--root={tmp_path / 'r'}",
                      "--search=tpe", "--space=optim.lr_scale=log:0:4")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == \
        "error: --space=optim.lr_scale=log:0:4: log bounds must be > 0"
    run = run_command("sweep", "configs/table3.py:base", f"--root={tmp_path / 'r'}",
                      "--search=tpe")
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: --search=tpe: give the space to search")
    assert not (tmp_path / "r").exists()


def test_an_experiment_files_space_is_extended_by_the_command_line(tmp_path):
    experiment = tmp_path / "lr.py"
    experiment.write_text(
        "from transformer_jax.sweeps import space\n"
        "from transformer_jax.sweeps.experiment import Sweep\n"
        "def get_sweep(arg=None):\n"
        "    return Sweep('lr', 'configs/table3.py', [{'variant': 'base'}],\n"
        "                 space=[space.log('optim.lr_scale', 0.25, 4)])\n")
    sweep = load_experiment(str(experiment), space=["optim.warmup_steps=int:100:600"],
                            seeds=2)
    assert [str(d) for d in sweep.space] == ["optim.lr_scale=log:0.25:4",
                                             "optim.warmup_steps=int:100:600"]
    assert sweep.axis() == "optim.lr_scale"
    assert [p.name for p in sweep.points()] == ["seed=0", "seed=1"]
    with pytest.raises(UserError, match="--space: optim.lr_scale given twice"):
        load_experiment(str(experiment), space=["optim.lr_scale=0.5:2"])
    with pytest.raises(UserError, match="space optim.lr_scale: low 4 >= high 1"):
        space.log("optim.lr_scale", 4, 1)
    assert ROOT.is_dir()
