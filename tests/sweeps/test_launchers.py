"""Launchers are found by name, one module each; a new one is one module, here written into
a directory named by TRANSFORMER_JAX_LAUNCHERS and used from the command line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax.errors import ConfigError
from transformer_jax.sweeps import launchers
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.run import run_sweep

ROOT = Path(__file__).resolve().parents[2]

# Two points at the paper's scale, every field that differs from the config file's own
# given here: the sweep's overrides, and big's learning-rate scale.
EXPERIMENT = """\
from transformer_jax.sweeps.experiment import Sweep
def get_sweep(arg=None):
    return Sweep('two', 'configs/table3.py',
                 [{'variant': 'base'},
                  {'name': 'slow_big', 'variant': 'big', 'optim.lr_scale': 0.5}],
                 overrides={'train.num_steps': 40, 'train.bleu_every': 20,
                            'train.bleu_sentences': 3000})
"""
TO_FILE = '''\
"""Appends each point's command to the file named by COMMANDS_FILE."""
import os

from transformer_jax.sweeps.launchers import WRITES, Launcher


class ToFile(Launcher):
    help = "append the commands to $COMMANDS_FILE"
    mode = WRITES

    def write(self, line):
        with open(os.environ["COMMANDS_FILE"], "a") as f:
            f.write(line + "\\n")


LAUNCHER = ToFile()
'''


def test_unknown_launcher_is_refused_naming_the_known_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert launchers.names() == ("local", "print", "slurm", "tpu")
    with pytest.raises(ConfigError, match=r"^--launcher=ssh is not one of local, print, slurm, "
                                          r"tpu$"):
        launchers.get("ssh")
    with pytest.raises(ConfigError, match="--launcher=ssh is not one of"):
        run_sweep(load_experiment("experiments/base_vs_big.py"), str(tmp_path), "ssh")
    assert not any(tmp_path.iterdir())  # refused before anything was written


@pytest.mark.slow  # 9 s of one core in make test (2026-12-07)
def test_a_launcher_in_one_new_module_is_used_from_the_command_line(tmp_path):
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "tofile.py").write_text(TO_FILE)
    experiment = tmp_path / "two.py"
    experiment.write_text(EXPERIMENT)
    commands, root = tmp_path / "commands.sh", tmp_path / "root"
    env = {**os.environ, launchers.REGISTRY.variable: str(tmp_path / "more"),
           "COMMANDS_FILE": str(commands)}

    def sweep(launcher):
        run = subprocess.run([sys.executable, "-m", "transformer_jax.sweep", str(experiment),
                              f"--root={root}", f"--launcher={launcher}"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout

    assert sweep("tofile") == ""
    written = commands.read_text()
    assert written == sweep("print")
    # Built by hand from each point's overrides.
    lines = written.splitlines()
    assert len(lines) == 2
    for line, (name, variant, more) in zip(lines, [
            ("base", "base", []), ("slow_big", "big", ["optim.lr_scale=0.5"])], strict=True):
        words = line.split()
        assert words[:5] == ["python", "-m", "transformer_jax.main",
                             f"--config=configs/table3.py:{variant}",
                             f"--workdir={root}/{name}"]
        assert sorted(words[5:]) == sorted(
            f"--config.{o}" for o in ["train.num_steps=40", "train.bleu_every=20",
                                      "train.bleu_sentences=3000", *more])
    # Like print, it started nothing: no point has a record.
    assert sorted(p.name for p in root.iterdir()) == ["sweep.json"]
