"""Learning-rate schedules: the paper's formula, the cosine schedule's values worked out by
hand, a schedule added as one file in a directory of TRANSFORMER_JAX_SCHEDULES and used from
the command line, and old workdirs (without optim.schedule) resuming with the paper's."""

import json
import logging
import math
import os
import subprocess
import sys

import pytest

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import ConfigError
from transformer_jax.io import layout, workdirs
from transformer_jax.training import schedules, train
from transformer_jax.training.spec import TrainingSpec

from ..helpers import ROOT, command_line, tiny_config


def rates(config, d_model, steps):
    """The learning rate of each of ``steps`` (1 for the first update), as the optimizer
    follows it: the schedule takes optax's count, one less."""
    schedule = schedules.schedule_of(config, d_model)
    return [float(schedule(step - 1)) for step in steps]


def logged_rates(workdir):
    return {step: record["learning_rate"]
            for step, record in workdirs.read_metrics(workdir)["train"].items()}


# ----------------------------------------------------------------------------------------
# The paper's schedule and the cosine one


@pytest.mark.parametrize("step,expected", [
    (1, 512 ** -0.5 * 4000 ** -1.5),  # 1.747e-7: warmup starts near zero
    (1000, 512 ** -0.5 * 1000 * 4000 ** -1.5),  # linear warmup
    (4000, 512 ** -0.5 * 4000 ** -0.5),  # the peak, 6.99e-4
    (16000, 512 ** -0.5 * 16000 ** -0.5),  # inverse square root decay
])
def test_the_default_schedule_is_the_papers_formula(step, expected):
    config = config_lib.build("base")
    assert config.optim.schedule == "rsqrt_warmup"
    assert rates(config, 512, [step]) == [pytest.approx(expected, rel=1e-5)]


def test_the_papers_schedule_peaks_at_the_end_of_warmup_and_scales():
    config = config_lib.build("base")
    before, peak, after = rates(config, 512, [3999, 4000, 4001])
    assert peak == pytest.approx(6.988e-4, rel=1e-3) and before < peak > after
    config.optim.lr_scale = 2.0
    assert rates(config, 512, [4000]) == [pytest.approx(2 * 6.988e-4, rel=1e-3)]


def test_cosine_schedule_by_hand():
    config = config_lib.build("base")
    config.optim.update(schedule="warmup_cosine", warmup_steps=100, min_lr_ratio=0.1)
    config.train.num_steps = 300
    # d_model 64, 100 warmup steps: the peak is (64 * 100)^-0.5 = 1/80 = 0.0125, the floor
    # 0.1 of it, 0.00125. The cosine runs from step 100 to step 300:
    #   step 50, half the warmup:        0.0125 * 50/100                      = 0.00625
    #   step 100, the end of warmup:     the peak                             = 0.0125
    #   step 150, a quarter of the decay: 0.00125 + 0.01125 * (1 + cos(pi/4))/2
    #                                     = 0.00125 + 0.01125 * 0.853553     = 0.0108525
    #   step 200, midway:                0.00125 + 0.01125 * (1 + cos(pi/2))/2 = 0.006875
    #   step 300, the end, and after:    the floor                            = 0.00125
    assert rates(config, 64, [50, 100, 150, 200, 300, 400]) == pytest.approx(
        [0.00625, 0.0125, 0.0108525, 0.006875, 0.00125, 0.00125], rel=1e-5)
    # Its peak is the paper's schedule's, at the same step.
    config.optim.schedule = "rsqrt_warmup"
    assert rates(config, 64, [100]) == [pytest.approx(0.0125, rel=1e-6)]


def test_bad_schedule_settings_are_refused_in_one_line_naming_the_field():
    config = config_lib.build("base")
    config.optim.schedule = "cosine"
    with pytest.raises(ConfigError) as e:
        schedules.check(config)
    assert str(e.value) == ("optim.schedule='cosine' is not one of "
                            f"{', '.join(schedules.names())}")
    config.optim.schedule = "warmup_cosine"
    config.train.num_steps = config.optim.warmup_steps
    with pytest.raises(ConfigError, match=r"^optim.warmup_steps=4000 must be less than "
                                          r"train.num_steps=4000"):
        schedules.check(config)
    config.optim.min_lr_ratio = 1.5
    with pytest.raises(ConfigError, match=r"^optim.min_lr_ratio=1.5 must be a number in "
                                          r"\[0.0, 1.0\]"):
        config_lib.validate(config)


def test_a_schedule_file_must_say_how_to_make_it_and_what_it_reads(tmp_path, monkeypatch):
    (tmp_path / "half_done.py").write_text("FIELDS = ('optim.warmup_steps',)\n")
    (tmp_path / "misread.py").write_text(
        "FIELDS = ('optim.warmup',)\n"
        "def make(config, d_model):\n"
        "    return lambda step: 0.001\n")
    monkeypatch.setattr(schedules, "__path__", [*schedules.__path__, str(tmp_path)])
    assert {"half_done", "misread"} <= set(schedules.names())
    config = config_lib.build("base")
    config.optim.schedule = "half_done"
    with pytest.raises(ConfigError, match=r"^optim.schedule='half_done': .*half_done.py must "
                                          r"define make\(config, d_model\) and FIELDS"):
        schedules.check(config)
    config.optim.schedule = "misread"
    with pytest.raises(ConfigError, match=r"^optim.schedule='misread' reads optim.warmup, a "
                                          r"field the config does not have"):
        schedules.check(config)


def test_a_schedule_reads_the_fields_it_names_alone(tmp_path, monkeypatch):
    """A schedule's make sees the fields of its FIELDS, read once into the run's OptimSpec,
    and nothing else of the config: one that reads another is refused in one line."""
    (tmp_path / "unnamed.py").write_text(
        "FIELDS = ('optim.lr_scale',)\n"
        "def make(config, d_model):\n"
        "    return lambda step: config.optim.lr_scale / config.optim.warmup_steps\n")
    (tmp_path / "unnamed_eager.py").write_text(
        "FIELDS = ('optim.lr_scale',)\n"
        "def make(config, d_model):\n"
        "    peak = config.train.num_steps\n"
        "    return lambda step: peak\n")
    monkeypatch.setattr(schedules, "__path__", [*schedules.__path__, str(tmp_path)])
    config = config_lib.build("base")
    config.optim.update(schedule="unnamed_eager", lr_scale=2.0)
    with pytest.raises(ConfigError) as e:
        TrainingSpec.from_config(config)  # made when the spec is built: refused there
    assert str(e.value) == ("optim.schedule='unnamed_eager' reads 'train', which its FIELDS "
                            "(optim.lr_scale) does not name")
    config.optim.schedule = "unnamed"
    spec = TrainingSpec.from_config(config)  # read when the rate is first computed
    with pytest.raises(ConfigError) as e:
        schedules.learning_rate(spec.optim.schedule, spec.optim.settings, 512)(0)
    assert str(e.value) == ("optim.schedule='unnamed' reads 'warmup_steps', which its FIELDS "
                            "(optim.lr_scale) does not name")
    config.optim.schedule = "warmup_cosine"
    spec = TrainingSpec.from_config(config)
    assert spec.optim.settings == {"optim.warmup_steps": 4000, "optim.lr_scale": 2.0,
                                   "optim.min_lr_ratio": 0.1, "train.num_steps": 100_000}
    # The peak, lr_scale (d_model warmup_steps)^-0.5 = 2 (512 x 4000)^-0.5 = 1.3975e-3, at
    # the end of warmup: optax's count 3999.
    rate = schedules.learning_rate(spec.optim.schedule, spec.optim.settings, 512)
    assert float(rate(3999)) == pytest.approx(2 * (512 * 4000) ** -0.5, rel=1e-6)


def test_every_schedule_reads_fields_the_config_has():
    config = config_lib.build("base")
    config.train.num_steps = 2 * config.optim.warmup_steps
    assert config.optim.schedule in schedules.names()
    assert {"rsqrt_warmup", "warmup_cosine"} <= set(schedules.names())
    for name in schedules.names():
        config.optim.schedule = name
        assert schedules.check(config).FIELDS
        assert set(schedules.settings(config)) == set(schedules.get(name).FIELDS)


# ----------------------------------------------------------------------------------------
# A schedule added as one file, from the command line

# lrate = lr_scale * 0.01 / step: with lr_scale 2, 0.02, 0.01, 0.00667, 0.005 at steps 1-4.
INVERSE_STEP = '''
FIELDS = ("optim.lr_scale",)


def make(config, d_model):
    return lambda step: config.optim.lr_scale * 0.01 / step
'''


@pytest.mark.slow
def test_a_schedule_file_in_a_searched_directory_trains_from_the_command_line(
        tmp_path, builtin_data_dir):
    (tmp_path / "schedules").mkdir()
    (tmp_path / "schedules" / "inverse_step.py").write_text(INVERSE_STEP)
    env = {**os.environ, schedules.REGISTRY.variable: str(tmp_path / "schedules")}
    config = tiny_config(builtin_data_dir, num_steps=4, log_every=1, eval_every=4,
                         checkpoint_every=4, peak_flops=1e9)
    args = [sys.executable, "-m", "transformer_jax.main", *command_line(config),
            "--config.optim.lr_scale=2.0"]
    run = subprocess.run([*args, "--config.optim.schedule=inverse_step",
                          f"--workdir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "learning rate: inverse_step (optim.lr_scale 2.0)" in run.stderr
    assert logged_rates(tmp_path / "run") == pytest.approx(
        {1: 0.02, 2: 0.01, 3: 0.02 / 3, 4: 0.005}, rel=1e-6)
    # An unknown name: one line naming the known ones, the added file's among them, before
    # anything is written.
    bad = subprocess.run([*args, "--config.optim.schedule=inverse_steps",
                          f"--workdir={tmp_path / 'bad'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: optim.schedule='inverse_steps' is not one of inverse_step, rsqrt_warmup, "
        "warmup_cosine")
    assert not (tmp_path / "bad").exists()


# ----------------------------------------------------------------------------------------
# Workdirs trained before optim.schedule existed


@pytest.mark.slow
def test_an_old_workdir_resumes_with_the_papers_schedule(tmp_path, builtin_data_dir, caplog):
    config = tiny_config(builtin_data_dir, num_steps=6, log_every=1, eval_every=6,
                         checkpoint_every=6, peak_flops=1e9)
    train.train_and_evaluate(config, tmp_path)
    saved = json.loads((tmp_path / layout.CONFIG).read_text())
    del saved["optim"]["schedule"], saved["optim"]["min_lr_ratio"]  # as written before
    (tmp_path / layout.CONFIG).write_text(json.dumps(saved))
    assert resume.workdir_config(tmp_path).optim.schedule == "rsqrt_warmup"  # evaluate, ...
    config.train.num_steps = 8
    train.train_and_evaluate(config, tmp_path)
    changes = [json.loads(line)["changes"]
               for line in (tmp_path / layout.CONFIG_CHANGES).read_text().splitlines()]
    assert changes == [{"train.num_steps": [6, 8]}]  # the default schedule is no change
    # d_model 32, 20 warmup steps: 32^-0.5 * step * 20^-1.5, still warming up.
    assert logged_rates(tmp_path) == pytest.approx(
        {s: 32 ** -0.5 * s * 20 ** -1.5 for s in range(1, 9)}, rel=1e-5)
    # Another schedule from here on: the run says so, and follows it. d_model 32, 4 warmup
    # steps, 10 steps: the cosine's floor at step 10 is 0.1 * (32 * 4)^-0.5 = 0.0088388.
    config.optim.update(schedule="warmup_cosine", warmup_steps=4)
    config.train.num_steps = 10
    with caplog.at_level(logging.WARNING):
        train.train_and_evaluate(config, tmp_path)
    assert ("warning: optim.schedule, optim.warmup_steps, train.num_steps changed since the "
            "last run") in caplog.text
    assert logged_rates(tmp_path)[10] == pytest.approx(0.1 * 128 ** -0.5, rel=1e-5)
    assert math.isclose(logged_rates(tmp_path)[8], 32 ** -0.5 * 8 * 20 ** -1.5, rel_tol=1e-5)
