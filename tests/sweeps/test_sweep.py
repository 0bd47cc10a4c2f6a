"""Sweeps: experiments expand into the right configs, at the paper's scale and the demo's;
the commands reproduce them; points run, resume, are skipped when finished; bad input is
refused in one line."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags
from ml_collections import config_flags

from transformer_jax import config as config_lib
from transformer_jax.errors import ConfigError
from transformer_jax.io import holds
from transformer_jax.sweeps import hyper, launchers, records
from transformer_jax.sweeps.experiment import Sweep, load_experiment
from transformer_jax.sweeps.points import point_config, train_args
from transformer_jax.sweeps.run import run_sweep
from transformer_jax.sweeps.status import point_status, status_lines
from transformer_jax.sweeps.vocab import VOCAB_FIELDS, share_vocabulary

from ..helpers import run_command

ROOT = Path(__file__).resolve().parents[2]
HEADS = ROOT / "experiments" / "heads_ablation.py"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    # Experiments name their config files relative to the repository, like the commands.
    monkeypatch.chdir(ROOT)


def expand(spec, scale="paper", overrides=None, **kwargs):
    sweep = load_experiment(spec, **kwargs)
    return sweep, {p.name: point_config(sweep, p, scale, overrides)[0]
                   for p in sweep.points()}


def test_heads_ablation_is_row_a_with_h_times_dk_512():
    sweep, configs = expand(str(HEADS))
    assert sweep.parameter == "h" and [p.value for p in sweep.points()] == [1, 4, 8, 16, 32]
    assert list(configs) == ["A_h1", "A_h4", "base", "A_h16", "A_h32"]
    for point in sweep.points():
        m = configs[point.label].model
        d_k, d_v = config_lib.derived_dims(m)
        assert m.num_heads == point.value and d_k == d_v == 512 // point.value
        assert (m.num_layers, m.d_model, m.d_ff) == (6, 512, 2048)
        c = configs[point.label]
        assert c.data.name == "wmt14_ende" and c.train.num_steps == 100_000
        assert c.train.bleu_sentences == 3000  # all of newstest2013
        assert c.train.bleu_every == 100_000 and c.decode.strategy == "beam"  # the paper's
        assert c.train.visualize_sentences == ()


def test_demo_scale_keeps_h_times_dk_equal_to_d_model():
    _, configs = expand(str(HEADS), "demo")
    for label, heads, d_k in [("A_h1", 1, 128), ("A_h4", 4, 32), ("base", 8, 16),
                              ("A_h16", 16, 8), ("A_h32", 32, 4)]:
        c = configs[label]
        assert c.model.num_heads == heads
        assert config_lib.derived_dims(c.model) == (d_k, d_k)
        assert (c.model.num_layers, c.model.d_model, c.model.d_ff) == (3, 128, 512)
        assert c.scale == "demo" and c.data.name == "builtin" and c.train.num_steps == 450
        assert c.train.bleu_sentences == 300 and c.train.visualize_sentences == ()
        assert c.train.bleu_every == 450 and c.decode.strategy == "greedy"  # as the demo


def test_validation_bleu_is_at_the_last_step_after_overrides():
    sweep = load_experiment(str(HEADS))
    point = sweep.points()[0]
    for overrides, every in [({"train.num_steps": 20}, 20),
                             ({"train.bleu_sentences": 0}, 0),
                             ({"train.num_steps": 20, "train.bleu_every": 5}, 5)]:
        c, _ = point_config(sweep, point, "demo", overrides)
        assert c.train.bleu_every == every, overrides


@pytest.mark.parametrize("variant,changed", [
    ("C_N2", {"num_layers": 1}), ("C_N4", {"num_layers": 2}), ("C_N8", {"num_layers": 4}),
    ("C_d256", {"d_model": 64, "d_k": 8, "d_v": 8}),
    ("C_d1024", {"d_model": 256, "d_k": 32, "d_v": 32}),
    ("C_ff1024", {"d_ff": 256}), ("C_ff4096", {"d_ff": 1024}),
    ("B_dk16", {"d_k": 4}), ("B_dk32", {"d_k": 8}),
    ("D_drop02", {"dropout_rate": 0.2}), ("E_learned", {"positions": "learned"}),
    ("big", {"d_model": 256, "d_ff": 1024, "num_heads": 16}),  # and the paper's EN-FR P_drop
])
def test_demo_scale_keeps_each_variants_ratio_to_the_base_model(variant, changed):
    sweep = Sweep("t", "configs/table3.py", hyper.sweep("variant", ["base", variant]))
    base, c = (point_config(sweep, p, "demo")[0] for p in sweep.points())
    differs = {k: v for k, v in c.model.to_dict().items() if base.model[k] != v}
    assert differs == changed
    assert c.train.num_steps == (750 if variant == "big" else 450)  # big: ~4x base's CPU


def test_table3_rows_cover_rows_a_to_e_each_with_the_base_model():
    rows = ["A", "B", "C_N", "C_d", "C_ff", "D_drop", "D_ls", "E"]
    seen = set()
    for row in rows:
        sweep, configs = expand(f"experiments/table3_rows.py:{row}")
        assert "base" in configs
        seen |= set(configs)
        for point in sweep.points():  # the swept value is the config's
            c = configs[point.label]
            actual = {"d_k": config_lib.derived_dims(c.model)[0], "N": c.model.num_layers,
                      "h": c.model.num_heads,
                      "d_model": c.model.d_model, "d_ff": c.model.d_ff,
                      "P_drop": c.model.dropout_rate, "eps_ls": c.train.label_smoothing,
                      "positions": c.model.positions}[sweep.parameter]
            assert actual == point.value, (row, point)
    assert seen == set(config_lib.VARIANTS) - {"big"}
    _, everything = expand("experiments/table3_rows.py")  # the whole table: 19 settings
    assert set(everything) == seen and len(everything) == 19
    with pytest.raises(Exception, match="unknown Table 3 sweep 'F'"):
        expand("experiments/table3_rows.py:F")


def test_base_vs_big():
    _, configs = expand("experiments/base_vs_big.py")
    assert configs["base"].model.d_model == 512 and configs["big"].model.d_model == 1024
    assert configs["big"].train.num_steps == 300_000


def test_each_command_reproduces_its_points_config():
    sweep = load_experiment(str(HEADS), seeds=2)
    for scale in ("paper", "demo"):
        for point in sweep.points():
            config, own = point_config(sweep, point, scale)
            cmd = launchers.get("local").command(sweep, point, train_args(
                sweep, point, scale, config, own, "runs/x"))
            assert cmd[:3] == ["python", "-m", "transformer_jax.main"]
            assert cmd[4] == f"--workdir=runs/x/{point.name}"
            argv = ["main", cmd[3], *cmd[5:]]
            values = flags.FlagValues()
            holder = config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
            values(argv)
            assert holder.value.to_dict() == config.to_dict(), (scale, point)


def test_launchers_commands():
    sweep = load_experiment(str(HEADS))
    point = sweep.points()[0]
    args = ("configs/table3.py:A_h1", "runs/h/A_h1", ["--config.train.seed=1"])
    assert launchers.get("slurm").command(sweep, point, args) == [
        "sbatch", "--parsable", "--job-name=heads_ablation-A_h1",
        "--output=runs/h/A_h1/slurm-%j.out", "--open-mode=append", "launch/slurm.sbatch",
        "configs/table3.py:A_h1", "runs/h/A_h1", "--config.train.seed=1"]
    assert launchers.get("tpu").command(sweep, point, args) == [
        "launch/tpu_pod.sh", "configs/table3.py:A_h1", "runs/h/A_h1", "--config.train.seed=1"]


def test_unknown_variant_or_field_is_refused_in_one_line(tmp_path):
    experiment = tmp_path / "bad.py"
    experiment.write_text(
        "from transformer_jax.sweeps import hyper\n"
        "from transformer_jax.sweeps.experiment import Sweep\n"
        "def get_sweep(arg=None):\n"
        "    return Sweep('bad', 'configs/table3.py', hyper.sweep('variant', ['base', 'A_h3']))\n")
    with pytest.raises(ConfigError, match=r"point A_h3: unknown variant 'A_h3'; known: base"):
        expand(str(experiment))
    with pytest.raises(ConfigError, match="point A_h1: unknown config field model.heads"):
        expand(str(HEADS), overrides={"model.heads": 3})
    run = run_command("sweep", str(experiment), f"--root={tmp_path / 'root'}")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(
        "error: point A_h3: unknown variant 'A_h3'; known: base, A_h1,")
    assert not (tmp_path / "root").exists()  # nothing started


def test_print_launcher_writes_a_script_of_the_pending_commands(tmp_path):
    root = tmp_path / "heads"
    run = subprocess.run(
        [sys.executable, "-m", "transformer_jax.sweep", str(HEADS), f"--root={root}",
         "--launcher=print", "--scale=demo", "--config.train.seed=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("python -m transformer_jax.main "
                               "--config=configs/table3.py:A_h1,dataset=builtin,scale=demo "
                               f"--workdir={root}/A_h1 ")
    assert all("--config.train.seed=3" in line for line in lines)
    # The config file gives the demo scale: the overrides are the sweep's own settings.
    assert "--config.model" not in lines[4] and "--config.decode.strategy=greedy" in lines[4]
    definition = json.loads((root / "sweep.json").read_text())
    assert [p["name"] for p in definition["points"]] == ["A_h1", "A_h4", "base", "A_h16",
                                                         "A_h32"]
    assert definition["parameter"] == "h" and definition["scale"] == "demo"
    # The root belongs to this sweep at this scale now.
    with pytest.raises(Exception, match="holds the sweep heads_ablation at scale demo"):
        run_sweep(load_experiment(str(HEADS)), str(root), "print",
                            "paper")


def test_finished_points_are_skipped_and_the_others_run_again(tmp_path, capsys):
    # No training: finished means final_metrics.json at the point's last step (450 at demo).
    for point, step in [("A_h1", 450), ("A_h4", 150), ("base", 450)]:
        (tmp_path / point).mkdir()
        (tmp_path / point / "final_metrics.json").write_text(json.dumps({"step": step}))
    outcome = run_sweep(load_experiment(str(HEADS)), str(tmp_path),
                                  "print", "demo")
    assert outcome == {"A_h1": "skipped: finished", "base": "skipped: finished",
                       "A_h4": "printed", "A_h16": "printed", "A_h32": "printed"}
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["# A_h1: finished", "# base: finished"]
    assert [line.split("--workdir=")[1].split()[0] for line in lines[2:]] == [
        f"{tmp_path}/{p}" for p in ("A_h4", "A_h16", "A_h32")]


# Tiny trainings in subprocesses: 75 s here after the shared tiny sweep's 3.5 min (both on a
# busy 2-core machine; the fixture runs once for this file and test_compare.py).
@pytest.mark.slow
def test_local_sweep_runs_in_parallel_resumes_and_skips_finished_points(tmp_path, tiny_sweep):
    experiment, first_root, outcome = tiny_sweep
    sweep = load_experiment(experiment)

    # 10 steps, two points at once: both ran, the broken one failed without stopping them.
    assert outcome["base"] == outcome["D_ls0"] == "finished"
    assert outcome["broken"].startswith("failed (exit ")
    records = {p: json.loads((first_root / p / "sweep_point.json").read_text())
               for p in ("base", "D_ls0")}
    spans = [_span(records[p]["attempts"][0]) for p in ("base", "D_ls0")]
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]  # they overlapped
    assert records["base"]["attempts"][0]["returncode"] == 0
    assert records["base"]["attempts"][0]["cpu_s"] > 0
    assert json.loads((first_root / "base" / "final_metrics.json").read_text())["step"] == 10
    assert point_status(first_root / "broken", 10).kind == "failed"

    # 20 steps: both points are unfinished now and resume from their step-10 checkpoints.
    root = tmp_path / "root"
    shutil.copytree(first_root, root)
    more = {"train.num_steps": 20, "train.bleu_sentences": 0}
    outcome = run_sweep(sweep, str(root), "local", parallel=2, overrides=more)
    assert outcome["base"] == outcome["D_ls0"] == "finished"
    for point in ("base", "D_ls0"):
        assert "resuming from step 10" in (root / point / "train.log").read_text()
        train_steps = [json.loads(line)["step"] for line in
                       (root / point / "metrics.jsonl").read_text().splitlines()
                       if json.loads(line)["split"] == "train"]
        assert train_steps == [5, 10, 15, 20]  # steps 1-10 were not trained again
        assert json.loads((root / point / "final_metrics.json").read_text())["step"] == 20

    # Again: the finished points are skipped (no new attempt); the broken one is retried.
    outcome = run_sweep(sweep, str(root), "local", overrides=more)
    assert outcome["base"] == outcome["D_ls0"] == "skipped: finished"
    assert len(json.loads((root / "base" / "sweep_point.json").read_text())["attempts"]) == 2
    assert len(json.loads((root / "broken" / "sweep_point.json").read_text())["attempts"]) == 3


def _span(attempt):
    import datetime

    start = datetime.datetime.fromisoformat(attempt["started"]).timestamp()
    return start, start + attempt["wall_s"]


def test_points_share_a_vocabulary_trained_on_the_same_data(tmp_path):
    config = config_lib.build("base", "builtin")
    first, second, other = (tmp_path / n for n in ("a", "b", "c"))
    (first / "vocab").mkdir(parents=True)
    (first / "vocab" / "spm.model").write_bytes(b"model bytes")
    (first / "config.json").write_text(config.to_json())
    second.mkdir()
    wanted = {k: config.data[k] for k in VOCAB_FIELDS}  # a point's PointSpec.vocabulary
    assert share_vocabulary(tmp_path, second, wanted)
    assert (second / "vocab" / "spm.model").read_bytes() == b"model bytes"
    other.mkdir()  # another vocabulary size: trains its own
    assert not share_vocabulary(tmp_path, other, {**wanted, "vocab_size": 999})
    assert not (other / "vocab").exists()


def test_sweep_refuses_bad_flags_in_one_line(tmp_path):
    for args, message in [(["--parallel=0"], "error: --parallel=0 must be >= 1"),
                          (["--launcher=tpu", "--parallel=2"],
                           "error: --launcher=tpu runs one point at a time"),
                          (["--launcher=ssh"], "error: flag --launcher=ssh")]:
        run = run_command("sweep", str(HEADS), f"--root={tmp_path}", "--dry_run", *args)
        assert run.returncode != 0
        assert run.stderr.strip().splitlines()[-1].startswith(message), run.stderr[-500:]


def test_a_workdir_of_another_architecture_is_not_resumed(tmp_path):
    sweep = load_experiment(str(HEADS))
    workdir = tmp_path / "A_h4"
    (workdir / "checkpoints").mkdir(parents=True)
    other = config_lib.build("A_h4")
    other.model.d_model = 256
    (workdir / "config.json").write_text(other.to_json())
    with pytest.raises(Exception, match=r"point A_h4: .*config.json differs from the sweep's "
                                        r"config: model.d_model: 256 in the workdir, 512 asked; "
                                        r"use another --root"):
        run_sweep(sweep, str(tmp_path), "print")


def test_status_of_finished_failed_running_and_unstarted_points(tmp_path, capsys):
    sweep = load_experiment(str(HEADS), seeds=2)
    names = [p.name for p in sweep.points()]
    assert names[:3] == ["A_h1,seed=0", "A_h1,seed=1", "A_h4,seed=0"]
    logs = {"split": "train", "loss": 2.5, "tokens_per_s": 3000.0, "steps_per_s": 0.5}
    finished, failed, running = (tmp_path / n for n in names[:3])
    for workdir, step in [(finished, 450), (failed, 150), (running, 300)]:
        workdir.mkdir()
        (workdir / "metrics.jsonl").write_text(json.dumps({**logs, "step": step}) + "\n")
    (finished / "final_metrics.json").write_text(json.dumps({"step": 450}))
    records.record_attempt(finished, {"point": names[0]}, {"wall_s": 600.0, "returncode": 0})
    records.record_attempt(failed, {"point": names[1]}, {"wall_s": 10.0, "returncode": 2})
    (failed / "train.log").write_text("12:00:01 model: ...\nerror: data.train_files: "
                                      "no such file x.tsv\n")
    with holds.Hold(running):  # this process holds it, as a training run would
        lines = status_lines(sweep, str(tmp_path), "demo")
    assert len(lines) == len(names) + 1
    assert lines[0].split()[:4] == ["A_h1,seed=0", "finished", "step", "450/450"]
    assert lines[1].split()[:2] == ["A_h1,seed=1", "failed"]
    assert lines[1].endswith("error: data.train_files: no such file x.tsv")
    # Running: 150 steps left at 0.5 steps/s is 5 minutes.
    assert lines[2].split()[:4] == ["A_h4,seed=0", "running", "step", "300/450"]
    assert "loss 2.500" in lines[2] and "3,000 tokens/s" in lines[2] and "~5 min left" in lines[2]
    assert all(" not started" in line for line in lines[3:-1])
    # Totals: 8 points not started or failed at the finished one's 10 minutes, plus 5 minutes.
    assert lines[-1] == ("10 points: 1 finished, 1 failed, 1 running, 7 not started; about "
                         "85 min of training left, one point at a time (points not running "
                         "counted at the finished points' mean)")
    # Without the hold the same point has stopped.
    assert status_lines(sweep, str(tmp_path), "demo")[2].split()[1] == \
        "stopped"


def test_sweep_json_records_each_points_setting_and_seeds(tmp_path):
    sweep = load_experiment(str(HEADS), seeds=3)
    run_sweep(sweep, str(tmp_path), "print", "demo")
    definition = json.loads((tmp_path / "sweep.json").read_text())
    assert definition["swept"] == ["variant", "seed"] and definition["parameter"] == "h"
    points = definition["points"]
    assert len(points) == 15
    assert points[4]["name"] == "A_h4,seed=1" and points[4]["setting"] == "A_h4"
    assert points[4]["seeds"] == {"train.seed": 1, "data.shuffle_seed": 1}
    assert points[4]["value"] == 4 and points[4]["config"]["train"]["seed"] == 1
