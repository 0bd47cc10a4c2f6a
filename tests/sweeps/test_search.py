"""Searches: trials asked of an Optuna study, trained, told; resumed without asking again;
two controllers sharing one study through the journal file and through PostgreSQL; stopped
runs told PRUNED; the status, the report and optuna-dashboard of a study."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import optuna
import pytest
from absl import app  # noqa: F401 -- its flags defined before the commands run here

from transformer_jax.io import workdirs
from transformer_jax.sweeps import launchers, search
from transformer_jax.sweeps.experiment import load_experiment

from ..gcs_emulator import free_port
from ..helpers import ROOT, run_command, tiny_overrides

# Seconds-long trials: 4 steps, one evaluation at the end, no BLEU.
SHORT = {"train.num_steps": 4, "train.log_every": 2, "train.eval_every": 4,
         "train.eval_batches": 1, "train.checkpoint_every": 4, "train.bleu_sentences": 0}


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(ROOT)  # experiments name their config files relative to the repository


def experiment_file(path, data_dir, name="lr_search"):
    """A search over lr_scale and warmup_steps of tiny trainings."""
    path.write_text(
        "from transformer_jax.sweeps import space\n"
        "from transformer_jax.sweeps.experiment import Sweep\n"
        "def get_sweep(arg=None):\n"
        f"    return Sweep({name!r}, 'configs/table3.py', [{{'variant': 'base'}}],\n"
        f"                 overrides={tiny_overrides(data_dir, **SHORT)!r},\n"
        "                 space=[space.log('optim.lr_scale', 0.25, 4),\n"
        "                        space.integer('optim.warmup_steps', 5, 50)])\n")
    return str(path)


def study_of(root, name="lr_search", storage=""):
    return search.load_study(name, search.storage_url(str(root), storage))


def trial_dirs(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith("trial="))


def final_value(root, name):
    return json.loads((root / name / "final_metrics.json").read_text())["perplexity"]


# A real tiny search of 2 trials, resumed, extended; ~3 min on a busy 2-core machine.
@pytest.mark.slow
def test_a_search_resumes_without_asking_again_and_extends(tmp_path, builtin_data_dir):
    sweep = load_experiment(experiment_file(tmp_path / "lr.py", builtin_data_dir))
    root = tmp_path / "root"
    outcome = search.run_search(sweep, str(root), search.Search("tpe", 2), parallel=2)
    assert sorted(outcome) == ["trial=0", "trial=1"]
    study = study_of(root)
    trials = study.get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    names = trial_dirs(root)
    assert len(names) == 2
    for t in trials:
        (name,) = t.user_attrs["points"]
        assert name.startswith(f"trial={t.number},lr_scale=")
        assert f"warmup_steps={t.params['optim.warmup_steps']}" in name
        assert t.value == pytest.approx(final_value(root, name))  # told the run's figure
        record = json.loads((root / name / "sweep_point.json").read_text())
        assert record["trial"] == t.number and record["seeds"]["train.seed"] == 0
        assert record["fields"]["optim.lr_scale"] == t.params["optim.lr_scale"]
        config = json.loads((root / name / "config.json").read_text())
        assert config["optim"]["lr_scale"] == t.params["optim.lr_scale"]
        assert config["search"]["trial"] == t.number
        assert config["search"]["storage"] == str(root / "study.journal")
    stamps = {n: (root / n / "final_metrics.json").stat().st_mtime for n in names}

    # Again: nothing asked, nothing trained.
    assert search.run_search(sweep, str(root), search.Search("tpe", 2)) == {}
    assert len(study_of(root).trials) == 2 and trial_dirs(root) == names
    assert {n: (root / n / "final_metrics.json").stat().st_mtime for n in names} == stamps

    # --trials=3 adds exactly one.
    assert list(search.run_search(sweep, str(root), search.Search("tpe", 3))) == ["trial=2"]
    assert len(study_of(root).trials) == 3 and len(trial_dirs(root)) == 3

    # A trial left running by a controller that is gone is launched again, not asked anew.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    study = study_of(root)
    trial = study.ask({d.field: d.distribution() for d in sweep.space})
    trial.set_user_attr(search.CLAIM, {"host": socket.gethostname(), "pid": int(gone),
                                       "since": workdirs.now(), "heartbeat": workdirs.now()})
    assert list(search.run_search(sweep, str(root), search.Search("tpe", 4))) == ["trial=3"]
    trials = study_of(root).get_trials()
    assert len(trials) == 4 and trials[3].state == optuna.trial.TrialState.COMPLETE

    # The status: every trial's point, and the best so far.
    lines = search.status_lines(sweep, str(root), search.Search("tpe", 4))
    best = min(trials, key=lambda t: t.value)
    assert lines[-2] == "search lr_search: 4 trials: 4 complete"
    assert lines[-1].startswith(f"best so far: trial {best.number} (optim.lr_scale=")
    assert lines[-1].endswith(f"perplexity {best.value:.4g}")
    assert sum(" finished " in line for line in lines) == 4

    # The report: the best trials and Optuna's plots beside the seed statistics.
    run = run_command("compare", str(root))
    assert run.returncode == 0, run.stderr[-2000:]
    text = (root / "results.md").read_text()
    assert "## Search" in text and "## Settings" in text
    assert f"| {best.number} | {best.params['optim.lr_scale']:.4g} |" in text
    for png in ("search_history.png", "search_importances.png", "search_slices.png"):
        assert (root / png).stat().st_size > 1000


def _two_controllers(tmp_path, data_dir, storage=""):
    experiment = experiment_file(tmp_path / "lr.py", data_dir)
    root = tmp_path / "root"
    command = [sys.executable, "-m", "transformer_jax.sweep", experiment, f"--root={root}",
               "--search=random", "--trials=3"] + ([f"--storage={storage}"] if storage else [])
    if not storage:  # the journal file is in the root: both must see it
        root.mkdir()
    procs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    study = study_of(root, storage=storage)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 3  # together, --trials
    ran = [{int(line.split("trial ")[1].split(":")[0]) for line in log.splitlines()
            if "lr_search: trial " in line} for log in logs]
    assert ran[0].isdisjoint(ran[1]) and ran[0] | ran[1] == {t.number for t in complete}
    names = trial_dirs(root)
    assert sorted(n for t in complete for n in t.user_attrs["points"]) == names
    for name in names:  # no trial ran twice
        record = json.loads((root / name / "sweep_point.json").read_text())
        assert len(record["attempts"]) == 1 and record["attempts"][0]["returncode"] == 0


# Two controllers of 3 trials at once: ~3 min each on a busy 2-core machine.
@pytest.mark.slow
def test_two_controllers_share_a_study_through_the_journal_file(tmp_path, builtin_data_dir):
    _two_controllers(tmp_path, builtin_data_dir)


@pytest.mark.slow
def test_two_controllers_share_a_study_in_postgresql(tmp_path, builtin_data_dir,
                                                     postgres_server):
    url = postgres_server.create_database("two_controllers")
    _two_controllers(tmp_path, builtin_data_dir, url)


def test_an_unreachable_database_ends_in_one_line_before_anything_starts(tmp_path):
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/none"
    for storage in (url, "nosuchdriver://x/y"):
        run = run_command("sweep", "configs/table3.py:base", f"--root={tmp_path / 'r'}",
                          "--search=tpe", "--space=optim.lr_scale=log:0.25:4",
                          f"--storage={storage}")
        assert run.returncode == 2
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and storage in last, run.stderr[-2000:]
        assert "Traceback" not in run.stderr
        assert not (tmp_path / "r").exists()


def test_a_stopped_run_is_told_pruned_and_a_finished_one_its_value(tmp_path):
    from transformer_jax.training import stops

    sweep = load_experiment("configs/table3.py:base", seeds=2,
                            space=["optim.lr_scale=log:0.25:4"])
    root = tmp_path / "root"
    root.mkdir()
    controller = search.Controller(sweep, str(root), launchers.get("local"), "demo",
                                   search.Search("random", 3), {}, sys.executable, "")
    controller.open(0, stops.open_storage(controller.url))
    numbers = [controller.ask() for _ in range(3)]
    assert numbers == [0, 1, 2] and controller.ask() is None  # --trials=3 asked
    points = {n: controller.points(n) for n in numbers}
    assert [p.name.rsplit(",", 1)[1] for p in points[0]] == ["seed=0", "seed=1"]
    steps = controller.config(points[0][0], 0)[0].train.num_steps
    for n, figures in ((0, (2.0, 3.0)), (1, (2.5, None))):
        for point, ppl in zip(points[n], figures, strict=True):
            (root / point.name).mkdir()
            final = {"step": steps, "perplexity": ppl} if ppl else {"step": steps}
            (root / point.name / "final_metrics.json").write_text(json.dumps(final))
    stop = stops.Stop("diverged", 100, "diverged at step 100 (...)")
    stops.write_record(root / points[1][1].name, stop, {"perplexity": 40.0})
    (root / points[2][0].name).mkdir()
    stops.write_record(root / points[2][0].name,
                       stops.Stop("pruned", 50, "pruned at step 50 (...)"), {})

    assert controller.tell(0, points[0]) == "perplexity 2.5"  # the mean over its seeds
    assert controller.tell(1, points[1]).startswith("diverged (")
    assert controller.tell(2, points[2]).startswith("pruned (")
    trials = study_of(root, sweep.name).get_trials()
    assert trials[0].value == 2.5
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "PRUNED"]
    assert trials[1].user_attrs["stopped"] == "diverged"
    lines = search.status_lines(sweep, str(root), search.Search("random", 3), "demo")
    assert lines[-1] == "best so far: trial 0 (optim.lr_scale=" \
        f"{float(format(trials[0].params['optim.lr_scale'], '.2g'))}): perplexity 2.5"
    assert any(" diverged (at step 100 of " in line for line in lines), lines
    assert any(" pruned (at step 50 of " in line for line in lines)


def test_the_print_launcher_writes_the_first_asks(tmp_path):
    root = tmp_path / "r"
    run = run_command("sweep", "configs/table3.py:base", f"--root={root}", "--scale=demo",
                      "--launcher=print", "--search=qmc", "--trials=8", "--parallel=2",
                      "--space=optim.lr_scale=log:0.25:4", "--space=model.num_heads=choice:4,8")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 3
    assert [line.split("--workdir=")[1].split()[0].startswith(f"{root}/trial={n},lr_scale=")
            for n, line in enumerate(lines[:2])] == [True, True]
    assert lines[2].startswith("# a search needs a running controller")
    trials = study_of(root, "table3_base").get_trials()
    assert [t.state.name for t in trials] == ["RUNNING", "RUNNING"]
    for line, t in zip(lines[:2], trials, strict=True):
        assert f"--config.search.trial={t.number}" in line or t.number == 0
        assert f"--config.model.num_heads={t.params['model.num_heads']}" in line or \
            t.params["model.num_heads"] == 8  # the config's own value is not repeated


def test_optuna_dashboard_lists_the_trials_of_a_study(tmp_path):
    from ..analysis.test_visualize import _browser

    journal = str(tmp_path / "study.journal")
    study = search.open_study("dash", journal, "minimize", "random", 0)
    for value in (4.0, 3.0, 3.5):
        trial = study.ask({"optim.lr_scale": optuna.distributions.FloatDistribution(
            0.25, 4, log=True)})
        assert trial.params["optim.lr_scale"] > 0
        study.tell(trial, value)
    port = free_port()
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "optuna-dashboard"),
                               journal, "--port", str(port), "--host", "127.0.0.1", "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/api/studies", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        browser = _browser()
        try:
            from selenium.webdriver.common.by import By
            from selenium.webdriver.support.ui import WebDriverWait

            browser.get(f"{url}/dashboard/studies/0/trials")
            WebDriverWait(browser, 60).until(
                lambda b: "Trial 2" in b.find_element(By.TAG_NAME, "body").text)
            text = browser.find_element(By.TAG_NAME, "body").text
            assert all(f"Trial {n}" in text for n in range(3)) and "Trial 3" not in text
        finally:
            browser.quit()
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


# Two tiny points of a grid as trials of a study: ~1 min on a busy 2-core machine.
@pytest.mark.slow
def test_a_pruned_grid_makes_each_point_a_trial(tmp_path, builtin_data_dir):
    from transformer_jax.sweeps.run import run_sweep

    experiment = tmp_path / "grid.py"
    experiment.write_text(
        "from transformer_jax.sweeps import hyper\n"
        "from transformer_jax.sweeps.experiment import Sweep\n"
        "def get_sweep(arg=None):\n"
        "    return Sweep('lr_grid', 'configs/table3.py',\n"
        "                 hyper.sweep('optim.lr_scale', [0.5, 2]),\n"
        f"                 overrides={tiny_overrides(builtin_data_dir, **SHORT)!r})\n")
    root = tmp_path / "root"
    outcome = run_sweep(load_experiment(str(experiment)), str(root), "local", parallel=2,
                        prune=search.Search(prune="median", trials=1))
    assert sorted(outcome) == ["lr_scale=0.5", "lr_scale=2"]
    trials = study_of(root, "lr_grid").get_trials()
    assert len(trials) == 2
    for t in trials:
        (name,) = t.user_attrs["points"]
        assert outcome[name].startswith(f"finished; trial {t.number}: perplexity ")
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.value == pytest.approx(final_value(root, name))
        assert json.loads((root / name / "sweep_point.json").read_text())["trial"] == t.number
        config = json.loads((root / name / "config.json").read_text())
        assert config["search"]["prune"] == "median" and config["search"]["trial"] == t.number
    # Again: both finished, skipped; no trial asked.
    again = run_sweep(load_experiment(str(experiment)), str(root), "local",
                      prune=search.Search(prune="median", trials=1))
    assert set(again.values()) == {"skipped: finished"}
    assert len(study_of(root, "lr_grid").get_trials()) == 2
