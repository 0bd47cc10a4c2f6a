"""Searches: trials asked of an Optuna study, trained, told; resumed without asking again;
two controllers sharing one study through the journal file and through PostgreSQL, drawing
distinct values and taking an abandoned trial once; exploring on one seed and confirming the
best on the others; stopped runs told PRUNED; a bucket root without --storage; the status,
the report and optuna-dashboard of a study; a journal file on a full disk."""

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import optuna
import pytest
from absl import app  # noqa: F401 -- its flags defined before the commands run here

from transformer_jax import studies
from transformer_jax.errors import DiskFull
from transformer_jax.io import workdirs
from transformer_jax.sweeps import launchers
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.search import (
    controller as controller_lib,
    run as search,
    samplers,
    study as study_lib,
    trials as trials_lib,
)
from transformer_jax.sweeps.search.spec import Search
from transformer_jax.training import stops

from .. import needs
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
    return study_lib.load_study(name, study_lib.storage_url(str(root), storage))


def trial_dirs(root):
    return sorted(p.name for p in root.iterdir() if p.name.startswith("trial="))


def final_value(root, name):
    return json.loads((root / name / "final_metrics.json").read_text())["perplexity"]


# A real tiny search of 2 trials, resumed, extended; ~3 min on a busy 2-core machine.
@pytest.mark.slow
def test_a_search_resumes_without_asking_again_and_extends(tmp_path, builtin_data_dir):
    sweep = load_experiment(experiment_file(tmp_path / "lr.py", builtin_data_dir))
    root = tmp_path / "root"
    outcome = search.run_search(sweep, str(root), Search("tpe", 2), parallel=2)
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
    assert search.run_search(sweep, str(root), Search("tpe", 2)) == {}
    assert len(study_of(root).trials) == 2 and trial_dirs(root) == names
    assert {n: (root / n / "final_metrics.json").stat().st_mtime for n in names} == stamps

    # --trials=3 adds exactly one.
    assert list(search.run_search(sweep, str(root), Search("tpe", 3))) == ["trial=2"]
    assert len(study_of(root).trials) == 3 and len(trial_dirs(root)) == 3

    # A trial left running by a controller that is gone is retired and its copy run.
    study = study_of(root)
    trial = study.ask({d.field: d.distribution() for d in sweep.space})
    trial.set_user_attr(study_lib.CLAIM, gone_claim())
    assert list(search.run_search(sweep, str(root), Search("tpe", 4))) == ["trial=4"]
    trials = study_of(root).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 + ["FAIL", "COMPLETE"]
    assert trials[4].params == trials[3].params and trials[4].user_attrs["retry_of"] == 3
    trials = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]

    # The status: every trial's point, the phase, the compute, and the best so far.
    lines = search.status_lines(sweep, str(root), Search("tpe", 4))
    best = min(trials, key=lambda t: t.value)
    assert lines[-3] == "phase: done, 4 trials (4 complete)"
    assert lines[-2].startswith(f"compute: {4 * 4} training steps, ")
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


def gone_claim():
    """The claim of a controller whose process has ended."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    return {"host": socket.gethostname(), "pid": int(gone), "since": workdirs.now(),
            "heartbeat": workdirs.now()}


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
    controller = controller_lib.Controller(sweep, str(root), launchers.get("local"), "demo",
                                           Search("random", 3, confirm=0), {}, sys.executable,
                                           "")
    controller.open(studies.open_storage(controller.url))
    numbers = [controller.next() for _ in range(3)]
    assert numbers == [0, 1, 2] and controller.next() is None  # --trials=3 asked
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
    lines = search.status_lines(sweep, str(root), Search("random", 3, confirm=0), "demo")
    assert lines[-3] == "phase: done, 3 trials (1 complete, 2 pruned)"
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
    study = study_lib.open_study("dash", journal, "minimize", samplers.build(
        "random", samplers.Budget(3, ())))
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
        # SIGTERM, not SIGINT: a shell starting the tests in the background ignores SIGINT
        # for them, and the server inherits that.
        server.terminate()
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
                        prune=Search(prune="median", trials=1))
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
                      prune=Search(prune="median", trials=1))
    assert set(again.values()) == {"skipped: finished"}
    assert len(study_of(root, "lr_grid").get_trials()) == 2


# ----------------------------------------------------------------------------------------
# Controllers that never collide


CONTROLLER = """
import os, sys, time, json
from transformer_jax.sweeps import launchers
from transformer_jax.sweeps.search import controller
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.search.spec import Search
from transformer_jax import studies
root, sampler, go = sys.argv[1], sys.argv[2], sys.argv[5]
trials, asks = int(sys.argv[3]), int(sys.argv[4])
sweep = load_experiment("configs/table3.py:base", space=["optim.lr_scale=log:0.25:4",
                        "optim.warmup_steps=int:100:600", "model.dropout_rate=0:0.3"])
c = controller.Controller(sweep, root, launchers.get("local"), "demo",
                          Search(sampler, trials, storage=os.environ.get("STORAGE", "")),
                          {}, sys.executable, "")
c.open(studies.open_storage(c.url))
while not os.path.exists(go):
    time.sleep(0.01)
got = [c.next() for _ in range(asks)]
# Alive until both have answered: a controller that has exited is gone, and the other then
# rightly retires what it holds (CI's busy machine once let one exit before the other asked).
open(os.path.join(root, f"answered.{os.getpid()}"), "w").close()
deadline = time.time() + 120
while time.time() < deadline and sum(
        f.startswith("answered.") for f in os.listdir(root)) < 2:
    time.sleep(0.01)
print(json.dumps(got))
"""


def race(root, sampler, trials, asks, storage=""):
    """Two controller processes, started together on ``root``'s study once both have opened
    it, each asking ``asks`` times; the numbers each got."""
    go = root / "go"
    env = {**os.environ, "STORAGE": storage}
    procs = [subprocess.Popen([sys.executable, "-c", CONTROLLER, str(root), sampler,
                               str(trials), str(asks), str(go)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    deadline = time.time() + 120
    while time.time() < deadline and not (root / "study.journal").exists() and not storage:
        time.sleep(0.1)
    time.sleep(3.0)  # both have imported and opened the study
    go.write_text("")
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    return [json.loads(o[0].strip().splitlines()[-1]) for o in outs]


@pytest.mark.parametrize("sampler", ["random", "qmc", "tpe"])
def test_two_controllers_opened_on_an_empty_study_draw_distinct_values(tmp_path, sampler):
    # Both open the study before either asks, as two controllers started together do, and
    # then ask in turn, each through its own storage object.
    sweep = load_experiment("configs/table3.py:base", space=[
        "optim.lr_scale=log:0.25:4", "optim.warmup_steps=int:100:600"])
    root = tmp_path / "root"
    root.mkdir()
    both = [controller_lib.Controller(sweep, str(root), launchers.get("local"), "demo",
                                      Search(sampler, 6), {}, sys.executable, "")
            for _ in range(2)]
    for c in both:
        c.open(studies.open_storage(c.url))
    assert [both[i % 2].next() for i in range(7)] == [0, 1, 2, 3, 4, 5, None]
    lr = [t.params["optim.lr_scale"] for t in both[0].study.get_trials()]
    assert len(set(lr)) == 6, lr


# Two controller processes a race: ~10 s each.
@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["random", "qmc", "tpe"])
def test_two_controllers_on_an_empty_study_never_draw_the_same_values(tmp_path, sampler):
    # Before, both seeded their sampler with the sweep's seed plus the trials counted when
    # the study opened (0 for both): the same draws. Now each trial's seed is its number's.
    root = tmp_path / "root"
    root.mkdir()
    got = race(root, sampler, trials=8, asks=4)
    assert sorted(got[0] + got[1]) == list(range(8))
    trials = study_of(root, "table3_base").get_trials()
    values = [tuple(sorted(t.params.items())) for t in trials]
    assert len(values) == 8 and len(set(values)) == 8, values
    for field in ("optim.lr_scale", "optim.warmup_steps", "model.dropout_rate"):
        assert len({t.params[field] for t in trials}) >= 7, field  # int warmups may meet once


def abandoned_study(url, sweep_name="table3_base", claim=None):
    """A study of one exploring trial left running by a controller that is gone (or one
    holding ``claim``)."""
    study = study_lib.open_study(sweep_name, url, "minimize", samplers.build(
        "random", samplers.Budget(1, ())))
    trial = study.ask({"optim.lr_scale": optuna.distributions.FloatDistribution(
        0.25, 4, log=True), "optim.warmup_steps": optuna.distributions.IntDistribution(100, 600),
        "model.dropout_rate": optuna.distributions.FloatDistribution(0, 0.3)})
    for key, value in ((study_lib.CLAIM, claim or gone_claim()),
                       (study_lib.PHASE, study_lib.EXPLORE), (study_lib.NAMED, trial.number),
                       (study_lib.POINTS, ["trial=0,lr_scale=1,seed=0"])):
        trial.set_user_attr(key, value)
    return trial.params


def check_taken_once(got, study):
    # Exactly one controller took the abandoned trial (as its copy, trial 1); the other,
    # with --trials=1 reached, found no work.
    assert sorted(got, key=lambda g: g[0] is None) == [[1], [None]], got
    trials = study.get_trials()
    assert [t.state.name for t in trials[:2]] == ["FAIL", "RUNNING"], trials
    # The other may have enqueued a second copy as it saw the trial gone too (told FAIL as a
    # duplicate, unrun), or seen the copy waiting and lost it to the first: Optuna's ask then
    # makes a new trial, told FAIL as surplus, unrun. Never a new trial that runs (which was
    # the race before: the original told FAIL before its copy existed, the other controller
    # counted no trial and asked one).
    assert all(t.state.name == "FAIL" and (
        (t.user_attrs.get("dropped"), t.user_attrs.get("retry_of")) in (
            ("duplicate", 0), ("surplus", None))) for t in trials[2:]), trials
    assert trials[1].params == trials[0].params
    assert {k: trials[1].user_attrs[k] for k in ("retry_of", "phase", "named", "points")} == {
        "retry_of": 0, "phase": "explore", "named": 0, "points": ["trial=0,lr_scale=1,seed=0"]}


def opened_pair(tmp_path, claim=None):
    """Two controllers of one search (--trials=1) on one journal, each its own storage, and
    its one trial left running; the study's trials are 0 and the copy ``queue_copy`` adds."""
    sweep = load_experiment("configs/table3.py:base", space=[
        "optim.lr_scale=log:0.25:4", "optim.warmup_steps=int:100:600",
        "model.dropout_rate=float:0:0.3"])
    root = tmp_path / "root"
    root.mkdir()
    abandoned_study(str(root / "study.journal"), claim=claim)
    both = [controller_lib.Controller(sweep, str(root), launchers.get("local"), "demo",
                                      Search("random", 1), {}, sys.executable, "")
            for _ in range(2)]
    for c in both:
        c.open(studies.open_storage(c.url))
    return both


def queue_copy(study):
    """The first step of trial 0's retirement alone (study_lib.retire: the copy, then FAIL)."""
    original = study.get_trials()[0]
    study.enqueue_trial(original.params, user_attrs={
        study_lib.RETRY_OF: 0, **{k: original.user_attrs[k] for k in study_lib.KEPT
                                  if k in original.user_attrs}})


def test_a_retirer_stopped_between_the_copy_and_the_fail_leaves_one_copy_to_run(tmp_path):
    # A controller killed between the two steps leaves the copy queued and the original
    # RUNNING, its controller gone: the next retires it again (a second copy) and runs the
    # first copy; the other finds the trial taken and no new one to ask.
    a, b = opened_pair(tmp_path)
    queue_copy(a.study)
    assert [a.next(), b.next()] == [1, None]
    check_taken_once([[1], [None]], a.study)


def test_a_copy_popped_before_its_retirer_told_the_fail_ends_the_original(tmp_path):
    # The retirer (on a host that saw the trial's heartbeat stale) queued the copy and has
    # not yet told FAIL when another controller pops it: that one tells it.
    live = {"host": socket.gethostname(), "pid": os.getpid(), "since": workdirs.now(),
            "heartbeat": workdirs.now()}
    a, b = opened_pair(tmp_path, claim=live)
    queue_copy(a.study)
    assert a.next() == 1 and b.next() is None
    check_taken_once([[1], [None]], a.study)


def test_two_retirements_at_once_run_the_lower_copy_alone(tmp_path):
    # Both controllers saw trial 0 gone and enqueued a copy before either told it FAIL.
    a, b = opened_pair(tmp_path)
    original = a.study.get_trials()[0]
    assert [study_lib.retire(c.study, original) for c in (a, b)] == [True, False]
    assert sorted([b.next(), a.next()], key=lambda n: n is None) == [1, None]
    check_taken_once([[1], [None]], a.study)


def test_a_copy_popped_by_the_other_between_seeing_it_and_asking_leaves_a_surplus_unrun(
        tmp_path):
    # b retires trial 0 and sees its copy waiting; a pops the copy before b's ask does, so
    # b's ask makes a new exploring trial past --trials=1: dropped, and b has no work. (CI
    # met this order with two controller processes on PostgreSQL.)
    a, b = opened_pair(tmp_path)
    ask, took = b.study.ask, []

    def a_first(*args, **kwargs):
        if not took:
            took.append(a.next())
        return ask(*args, **kwargs)

    b.study.ask = a_first
    assert b.next() is None and took == [1]
    trials = a.study.get_trials()
    assert [(t.number, t.state.name, t.user_attrs.get("dropped")) for t in trials] == [
        (0, "FAIL", None), (1, "RUNNING", None), (2, "FAIL", "surplus")]
    check_taken_once([[1], [None]], a.study)


def test_a_copy_of_a_trial_whose_controller_was_alive_after_all_is_dropped(tmp_path):
    # The copy was queued, but the trial's controller told it COMPLETE before the FAIL
    # landed: the copy would train it twice.
    a, b = opened_pair(tmp_path)
    queue_copy(a.study)
    a.study.tell(0, 3.5)
    assert a.next() is None and b.next() is None
    trials = a.study.get_trials()
    assert [(t.state.name, t.user_attrs.get("dropped")) for t in trials] == [
        ("COMPLETE", None), ("FAIL", "duplicate")]


# Two races of two controller processes: ~20 s.
@pytest.mark.slow
def test_two_controllers_racing_for_one_abandoned_trial_take_it_once(tmp_path):
    for attempt in range(2):  # two races: either taken twice fails
        root = tmp_path / f"root{attempt}"
        root.mkdir()
        abandoned_study(str(root / "study.journal"))
        got = race(root, "random", trials=1, asks=1)
        check_taken_once(got, study_of(root, "table3_base"))


# Two controller processes on a PostgreSQL study: ~40 s with the server's start.
@pytest.mark.slow
def test_two_controllers_racing_in_postgresql_take_an_abandoned_trial_once(
        tmp_path, postgres_server):
    url = postgres_server.create_database("abandoned")
    abandoned_study(url)
    root = tmp_path / "root"
    root.mkdir()
    got = race(root, "random", trials=1, asks=1, storage=url)
    check_taken_once(got, study_lib.load_study("table3_base", url))


def test_a_search_rooted_in_a_bucket_asks_for_storage_in_one_line(tmp_path):
    run = run_command("sweep", "configs/table3.py:base", "--root=gs://bucket/runs/lr",
                      "--scale=demo", "--space=optim.lr_scale=log:0.25:4", "--trials=4")
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("error: a search rooted in a bucket: gs://bucket/runs/lr/"
                           "study.journal: an Optuna journal file needs a file system that "
                           "locks"), last
    assert "--storage=postgresql" in last and "Traceback" not in run.stderr


def test_one_rule_says_what_is_a_database():
    for url, database in (("sqlite:///study.db", True), ("postgresql+psycopg2://u@h/db", True),
                          ("mysql://u@h/db", True), ("gs://b/study.journal", False),
                          ("runs/lr/study.journal", False), ("/abs/study.journal", False),
                          ("runs/a://b", False)):
        assert studies.is_database(url) is database, url
    # Training and the controller open, and refuse, through it.
    with pytest.raises(Exception, match="needs a file system that locks"):
        studies.open_storage("gs://b/study.journal")
    assert study_lib.load_study("s", "gs://b/study.journal") is None


# ----------------------------------------------------------------------------------------
# Exploring on one seed, confirming on the others


def finish(root, point, steps, perplexity):
    (root / point.name).mkdir(parents=True, exist_ok=True)
    (root / point.name / "final_metrics.json").write_text(json.dumps(
        {"step": steps, "perplexity": perplexity}))


def opened_controller(tmp_path, seeds, how):
    """(sweep, root, controller) of a search over lr_scale with ``seeds`` seeds, its study
    open in ``tmp_path / "root"``."""
    sweep = load_experiment("configs/table3.py:base", seeds=seeds,
                            space=["optim.lr_scale=log:0.25:4"])
    root = tmp_path / "root"
    root.mkdir()
    c = controller_lib.Controller(sweep, str(root), launchers.get("local"), "demo", how, {},
                                  sys.executable, "")
    c.open(studies.open_storage(c.url))
    return sweep, root, c


def test_the_best_explored_settings_are_confirmed_on_the_other_seeds_and_ranked_on_the_mean(
        tmp_path):
    how = Search("auto", 3, confirm=2)
    sweep, root, c = opened_controller(tmp_path, 3, how)
    assert [c.next() for _ in range(3)] == [0, 1, 2] and c.next() is None
    steps = c.config(c.points(0)[0], 0)[0].train.num_steps
    # Exploring: one run a trial, on the first seed.
    points = {n: c.points(n) for n in range(3)}
    assert [[p.name.rsplit(",", 1)[1] for p in points[n]] for n in range(3)] == [["seed=0"]] * 3
    status = search.status_lines(sweep, str(root), how, "demo")
    assert status[-3] == ("phase: exploring, 0 of 3 trials ended (3 running); then confirming "
                          "the best 2 on the other 2 seeds")
    for n, ppl in ((0, 2.0), (1, 1.5), (2, 3.0)):
        finish(root, points[n][0], steps, ppl)
        assert c.tell(n, points[n]) == f"perplexity {ppl:.4g}"
    # Confirming: the best two (trials 1 and 0) on seeds 1 and 2, one trial a run, unpruned.
    # A second controller that saw exploration end at the same moment enqueues them again.
    other = controller_lib.Controller(sweep, str(root), launchers.get("local"), "demo", how,
                                      {}, sys.executable, "")
    other.open(studies.open_storage(other.url))
    snapshot = other.study.get_trials()
    got = [c.next() for _ in range(4)]
    assert other._enqueue_confirmations(snapshot)  # the duplicates
    assert c.next() is None and other.next() is None  # the four duplicates dropped
    trials = c.study.get_trials()
    confirm = {n: (trials[n].user_attrs["named"], trials[n].user_attrs["seed_index"])
               for n in got}
    assert sorted(confirm.values()) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert sum(t.user_attrs.get("dropped") == "duplicate" for t in trials) == 4
    figures = {(1, 1): 1.9, (1, 2): 1.8, (0, 1): 1.4, (0, 2): 1.3}
    for n in got:
        (point,) = c.points(n)
        assert point.name.startswith(f"trial={confirm[n][0]},lr_scale=")
        assert point.name.endswith(f"seed={confirm[n][1]}")
        assert c.config(point, n)[0].search.prune == "none"
        finish(root, point, steps, figures[confirm[n]])
        c.tell(n, [point])
    # Ranked on the mean over the three seeds: trial 0 (2.0, 1.4, 1.3: 1.567) overtakes
    # trial 1 (1.5, 1.9, 1.8: 1.733), which was the best on the first seed alone.
    status = search.status_lines(sweep, str(root), how, "demo")
    assert status[-3] == ("phase: done, 3 trials explored (3 complete), 4 runs confirmed")
    assert status[-1] == ("best so far: trial 0 (optim.lr_scale="
                          f"{trials_lib.rounded(trials[0].params['optim.lr_scale'])}): "
                          "perplexity 1.567 ± 0.38, mean of 3 seeds")
    assert status[-2].startswith("compute: 0 training steps, 0.0 CPU-min spent")


def test_auto_says_what_it_chose_and_why():
    dims = tuple(load_experiment("configs/table3.py:base", space=[
        "optim.lr_scale=log:0.25:4", "optim.warmup_steps=int:100:600"]).space)
    auto = samplers.get("auto")
    gp_missing = samplers.get("gp").missing()
    line = auto.describe(samplers.Budget(12, dims))
    if gp_missing:
        assert line == ("auto chose tpe (multivariate, constant liar) after 3 Sobol start-up "
                        "trials of 12: a Gaussian process suits 12 trials of numeric "
                        f"parameters, but needs {', '.join(gp_missing)} (not installed)")
    else:
        assert line == ("auto chose gp after 3 Sobol start-up trials of 12: 12 trials of "
                        "numeric parameters: a Gaussian process")
    assert auto.describe(samplers.Budget(400, dims)).endswith(
        "after 10 Sobol start-up trials of 400: 400 trials are past a Gaussian process's few "
        "hundred")
    # Start-up sized to the budget: a quarter, at least dimensions + 1, at most 10.
    assert [samplers.Budget(n, dims).startup for n in (2, 8, 12, 24, 60)] == [2, 3, 3, 6, 10]


def test_a_search_of_label_smoothing_on_perplexity_says_so_in_one_line(tmp_path, caplog):
    # Smoothing raises perplexity while it can raise BLEU (four_fields_demo: smoothing 0.26 at
    # PPL 1.415 and BLEU 87.0, 0.12 at 1.228 and 86.4).
    sweep = load_experiment("configs/table3.py:base", space=[
        "optim.lr_scale=log:0.25:4", "train.label_smoothing=0:0.3"])
    with caplog.at_level(logging.INFO):
        assert search.run_search(sweep, str(tmp_path / "root"), Search("tpe", 4),
                                 scale="demo", dry_run=True) == {}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "table3_base: train.label_smoothing is searched on perplexity, which smoothing raises "
        "while it can raise BLEU (the paper's section 5.4); --objective=bleu with "
        "--config.train.bleu_every ranks the settings on translation"], caplog.messages
    assert Search("tpe", 4, objective="bleu").caveat(["train.label_smoothing"]) is None
    assert Search("tpe", 4).caveat(["optim.lr_scale", "model.dropout_rate"]) is None


def test_an_exploration_without_a_completed_trial_says_there_is_nothing_to_confirm(tmp_path):
    how = Search("qmc", 2, confirm=1)
    sweep, root, c = opened_controller(tmp_path, 2, how)
    for n in (c.next(), c.next()):
        (point,) = c.points(n)
        (root / point.name).mkdir()
        stops.write_record(root / point.name, stops.Stop("pruned", 150, "pruned at 150"), {})
        assert c.tell(n, [point]).startswith("pruned (")
    assert c.next() is None  # nothing to confirm, nothing queued
    assert search.status_lines(sweep, str(root), how, "demo")[-3] == (
        "phase: done, 2 trials explored (2 pruned), none completed or pruned after an "
        "evaluation: nothing to confirm; raise --trials to explore further")


def pruned_at(c, root, number, values):
    """Trial ``number``'s run stopped as pruned after reporting ``values`` ({step: value})."""
    (point,) = c.points(number)
    trial_id = c._trial(number)._trial_id
    for step, value in values.items():
        c.study._storage.set_trial_intermediate_value(trial_id, step, value)
    (root / point.name).mkdir()
    last = max(values)
    stops.write_record(root / point.name, stops.Stop("pruned", last, f"pruned at {last}"),
                       {"perplexity": values[last]})
    assert c.tell(number, [point]).startswith("pruned (")
    return point


def test_pruned_trials_fill_the_places_of_confirmation_that_completed_ones_leave(
        tmp_path, caplog):
    how = Search("qmc", 4, confirm=3)
    sweep, root, c = opened_controller(tmp_path, 3, how)
    assert [c.next() for _ in range(4)] == [0, 1, 2, 3]
    steps = c.config(c.points(0)[0], 0)[0].train.num_steps
    finish(root, c.points(0)[0], steps, 2.0)
    assert c.tell(0, c.points(0)) == "perplexity 2"
    # Trial 1 stopped early with the best figure; trial 2 later, with a worse one: a run
    # that went further is the better evidence, so trial 2 is promoted first. Trial 3
    # diverged: never promoted.
    pruned_at(c, root, 1, {150: 1.5})
    second = pruned_at(c, root, 2, {150: 1.8, 300: 2.5})
    (diverged,) = c.points(3)
    (root / diverged.name).mkdir()
    stops.write_record(root / diverged.name, stops.Stop("diverged", 40, "diverged"), {})
    c.tell(3, [diverged])
    trials = c.study.get_trials()
    assert [t.number for t in trials_lib.best_explored(trials, "minimize", 3)] == [0, 2, 1]
    # Confirmation: trial 0 on seeds 1 and 2; the promoted trials 2 and 1 on all three, their
    # first seed's run resumed (seed index 0) rather than trained again.
    with caplog.at_level(logging.INFO):
        got = [c.next() for _ in range(9)]
    assert got[-1] is None and c.next() is None
    assert caplog.messages.count(
        "table3_base: exploration ended; confirming trial(s) 0, 2, 1 on seed=1, seed=2; "
        "pruned trial(s) 2, 1 promoted (fewer than 3 completed), their seed=0 run resumed "
        "to the end") == 1, caplog.messages
    trials = c.study.get_trials()
    assert sorted((trials[n].user_attrs["named"], trials[n].user_attrs["seed_index"])
                  for n in got[:-1]) == [(0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1),
                                            (2, 2)]
    status = search.status_lines(sweep, str(root), how, "demo")
    assert status[-3].startswith("phase: confirming, 0 of 8 runs ended")
    # The promoted run's workdir: the stop kept aside, nothing stopped any more.
    assert stops.reopen(root / second.name, stops.PRUNED)
    assert stops.stopped(root / second.name) is None
    kept = json.loads((root / second.name / "reopened_stop.json").read_text())
    assert kept["step"] == 300 and kept["stopped"]["reason"] == "pruned"
    assert not stops.reopen(root / second.name, stops.PRUNED)  # nothing left to reopen
    assert not stops.reopen(root / diverged.name, stops.PRUNED)  # a divergence stays
    assert stops.stopped(root / diverged.name).reason == "diverged"


# A real tiny search where ASHA stops both trials at the first rung: ~1.5 min on 2 cores.
@pytest.mark.slow
def test_a_search_with_every_trial_pruned_promotes_the_best_and_resumes_its_run(
        tmp_path, builtin_data_dir):
    sweep = load_experiment(experiment_file(tmp_path / "lr.py", builtin_data_dir), seeds=2)
    root = tmp_path / "root"
    # 8 steps, evaluated and saved every 4: the first rung is step 4, and both trials, ASHA's
    # start-up trials for a budget of 2, stop there.
    steps = {"train.num_steps": 8, "train.eval_every": 4, "train.checkpoint_every": 4}
    how = Search("qmc", 2, prune="asha", confirm=1)
    search.run_search(sweep, str(root), how, parallel=1, overrides=steps)
    trials = study_of(root).get_trials()
    explored = [t for t in trials if t.user_attrs["phase"] == "explore"]
    assert [t.state.name for t in explored] == ["PRUNED", "PRUNED"]
    assert all(list(t.intermediate_values) == [4] for t in explored)
    best = min(explored, key=lambda t: t.intermediate_values[4])
    confirm = [t for t in trials if t.user_attrs["phase"] == "confirm"]
    assert sorted((t.user_attrs["named"], t.user_attrs["seed_index"]) for t in confirm) == [
        (best.number, 0), (best.number, 1)]
    assert all(t.state.name == "COMPLETE" for t in confirm)
    # Seed 0's run went on from its checkpoint at step 4 to step 8: the stop kept aside,
    # steps 1-4 logged once.
    (first,) = [n for n in trial_dirs(root) if n.startswith(f"trial={best.number},")
                and n.endswith("seed=0")]
    assert json.loads((root / first / "reopened_stop.json").read_text())["step"] == 4
    assert json.loads((root / first / "final_metrics.json").read_text())["step"] == 8
    logged = [json.loads(line)["step"] for line in (root / first / "metrics.jsonl")
              .read_text().splitlines() if json.loads(line).get("split") == "train"]
    assert logged == sorted(set(logged)) and logged[-1] == 8, logged
    status = search.status_lines(sweep, str(root), how, "demo", steps)
    assert status[-1].startswith(f"best so far: trial {best.number} ") and \
        status[-1].endswith("mean of 2 seeds"), status


@pytest.mark.faults
def test_a_journal_on_a_full_disk_is_left_whole_and_the_study_goes_on_once_there_is_room(
        tmp_path):
    # Optuna's own append left the part of an operation that fit, which the next append ran
    # into: a line that does not replay, and the study could not be opened again.
    space = {"lr": optuna.distributions.FloatDistribution(0.0, 1.0)}
    with needs.tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        journal = disk / "study.journal"
        study = optuna.create_study(storage=studies.open_storage(str(journal)), study_name="s")
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (shutil.disk_usage(disk).free - 2048))
        told = 0
        with pytest.raises(DiskFull, match=f"^{re.escape(str(journal))}: No space left on "
                                           "device: the write was undone"):
            for _ in range(1000):  # a trial asked and told takes some hundred bytes
                trial = study.ask(space)
                study.tell(trial, float(told))
                told += 1
        text = journal.read_text()
        assert told >= 1 and text.endswith("\n")
        assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
        ballast.unlink()
        study.tell(study.ask(space), 100.0)
        reopened = optuna.load_study(study_name="s", storage=studies.open_storage(str(journal)))
        assert [t.value for t in reopened.trials if t.state == optuna.trial.TrialState.COMPLETE
                ] == [*map(float, range(told)), 100.0]
    print(f"{told} trial(s) told before the disk refused an operation")
