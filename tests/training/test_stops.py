"""Runs that stop themselves: the divergence rule on made-up loss curves, Optuna's pruners
judging a trial through a journal-file study, and real tiny runs that diverge or are pruned
(a checkpoint at the stop, the record, the exit status, and a re-run that does not resume)."""

import json
import math

import jax
import optuna
import pytest

from transformer_jax import config as config_lib, studies
from transformer_jax.config import resume
from transformer_jax.errors import ConfigError, UserError
from transformer_jax.io import checkpoint_integrity, checkpoints, layout, workdirs
from transformer_jax.model.spec import TransformerConfig
from transformer_jax.studies import pruners
from transformer_jax.training import stops
from transformer_jax.training.spec import TrainingSpec
from transformer_jax.training.step import create_train_state

from ..helpers import command_line, run_command, tiny_config


def judge(watch, curve):
    """Feeds (step, training loss) pairs to ``watch``; returns its first Stop or None."""
    for step, loss in curve:
        stop = watch(stops.Evaluation(step, loss, {}))
        if stop is not None:
            return stop
    return None


# ----------------------------------------------------------------------------------------
# The divergence rule


def test_a_loss_above_the_threshold_k_evaluations_in_a_row_diverges():
    # Best 2.0 (at step 300), threshold 1.5 x 2.0 = 3.0: 3.5, 4.0, 9.0 are above it.
    curve = [(100, 6.0), (200, 3.0), (300, 2.0), (400, 3.5), (500, 4.0), (600, 9.0), (700, 1.0)]
    stop = judge(stops.Divergence(1.5, 3, after_step=200), curve)
    assert stop == stops.Stop("diverged", 600, (
        "diverged at step 600 (loss 9, best 2, threshold 3 = 1.5 x best, at 3 evaluations in "
        "a row after warmup; train.divergence_patience=3)"))


def test_a_loss_at_the_threshold_or_recovering_before_k_does_not_diverge():
    watch = stops.Divergence(1.5, 3, after_step=0)
    # 3.0 is the threshold itself; 3.1 twice, then 2.9 (below) starts the count again.
    curve = [(1, 2.0), (2, 3.0), (3, 3.1), (4, 3.1), (5, 2.9), (6, 3.1), (7, 3.1)]
    assert judge(watch, curve) is None
    assert (watch.best, watch.in_a_row) == (2.0, 2)
    assert watch(stops.Evaluation(8, 3.1, {})).step == 8  # the third in a row


def test_non_finite_losses_diverge_but_nothing_counts_before_warmup():
    watch = stops.Divergence(1.5, 2, after_step=400)
    # During warmup (steps <= 400) neither NaN nor a loss 100 times the best counts.
    warmup = [(100, 5.0), (200, math.nan), (300, 500.0), (400, math.inf)]
    assert judge(watch, warmup) is None and watch.best == 5.0
    stop = judge(watch, [(500, 4.0), (600, math.nan), (700, math.inf)])
    assert stop.step == 700 and stop.message.startswith("diverged at step 700 (loss inf, best 4,")
    # A run that was never finite after warmup diverges as well, with no best to name.
    assert judge(stops.Divergence(1.5, 2, 0), [(1, math.nan), (2, math.nan)]).message.startswith(
        "diverged at step 2 (loss nan, best none, threshold inf")


def test_the_count_carries_over_a_resume_through_the_checkpoint_meta():
    config = tiny_config(".", divergence_patience=2)
    watch = stops.Divergence.from_spec(TrainingSpec.from_config(config).stops, {})
    assert judge(watch, [(30, 2.0), (40, 5.0)]) is None
    resumed = stops.Divergence.from_spec(TrainingSpec.from_config(config).stops, watch.state())
    assert resumed(stops.Evaluation(50, 5.0, {})).step == 50


def test_the_settings_are_checked_and_free_to_change_on_resume():
    config = tiny_config(".")
    assert config.train.stop_on_divergence and config.train.divergence_patience == 3
    for field, value, message in [
            ("train.divergence_factor", 1.0, r"train.divergence_factor=1.0 must be a number in "
                                             r"\(1.0, inf\]"),
            ("train.divergence_patience", 0, "train.divergence_patience=0 must be an integer "
                                             ">= 1"),
            ("search.trial", -1, "search.trial=-1 must be an integer >= 0"),
            ("search.reduction_factor", 1, "search.reduction_factor=1 must be an integer >= 2"),
            ("search.objective", "tokens", "search.objective='tokens' is not one of loss, nll, "
                                           "perplexity, bleu"),
            ("search.storage", "study.log", "search.storage='study.log' needs search.study")]:
        bad = tiny_config(".")
        bad[field.split(".")[0]][field.split(".")[1]] = value
        with pytest.raises(ConfigError, match=f"^{message}"):
            config_lib.validate(bad)
    # The pruner's name is the pruner registry's to check (the config cannot import it).
    with pytest.raises(ConfigError, match="^search.prune='hyperband' is not one of asha, "
                                          "median, none"):
        pruners.get("hyperband")
    bleu = tiny_config(".", bleu_every=15, bleu_sentences=4)
    bleu.search.update(storage="study.log", study="s", objective="bleu")
    with pytest.raises(ConfigError, match="search.objective='bleu' needs train.bleu_every, a "
                                          "multiple of train.eval_every=10"):
        config_lib.validate(bleu)
    saved = json.loads(config.to_json())
    changed = json.loads(config.to_json())
    changed["train"]["stop_on_divergence"] = False
    changed["search"]["storage"] = "study.log"
    assert resume.resume_conflicts(saved, changed) == []


# ----------------------------------------------------------------------------------------
# Pruning through an Optuna study


def make_study(path, intermediate, direction="minimize"):
    """A journal-file study holding one completed trial for each of ``intermediate`` (a
    {step: value} curve each) and one running trial; returns the running trial's number."""
    study = optuna.create_study(study_name="s", storage=studies.open_storage(str(path)),
                                direction=direction)
    for curve in intermediate:
        study.add_trial(optuna.trial.create_trial(
            value=curve[max(curve)], intermediate_values=curve,
            state=optuna.trial.TrialState.COMPLETE))
    return study.ask().number


def search_config(path, number, **more):
    config = tiny_config(".")
    config.search.update(storage=str(path), study="s", trial=number,
                         **{"prune": "median", **more})
    return config.search


def test_the_median_pruner_prunes_a_trial_worse_than_the_median_of_the_completed(tmp_path):
    # Completed trials at step 10: 1.4, 1.5, 1.6, median 1.5; at step 20 median 1.2.
    done = [{10: 1.4, 20: 1.1}, {10: 1.5, 20: 1.2}, {10: 1.6, 20: 1.3}]
    good = make_study(tmp_path / "good.log", done)
    watch = stops.TrialWatch(search_config(tmp_path / "good.log", good, startup_trials=0))
    assert watch(stops.Evaluation(10, 5.0, {"perplexity": 1.45})) is None
    assert watch(stops.Evaluation(20, 5.0, {"loss": 0.1})) is None  # no objective: no report
    assert watch(stops.Evaluation(20, 5.0, {"perplexity": 1.15})) is None
    bad = make_study(tmp_path / "bad.log", done)
    watch = stops.TrialWatch(search_config(tmp_path / "bad.log", bad, startup_trials=0))
    assert watch(stops.Evaluation(10, 5.0, {"perplexity": 1.55})) == stops.Stop(
        "pruned", 10, f"pruned at step 10 (perplexity 1.55 reported to trial {bad} of study "
                      "'s'; search.prune='median')")
    # What the watch reported is in the study, for the controller to read.
    trial = optuna.load_study(study_name="s", storage=studies.open_storage(
        str(tmp_path / "bad.log"))).trials[bad]
    assert trial.intermediate_values == {10: 1.55}
    assert trial.state == optuna.trial.TrialState.RUNNING  # the controller's to finish


def test_pruning_follows_the_startup_trials_the_pruner_and_the_direction(tmp_path):
    done = [{10: 1.4}, {10: 1.5}, {10: 1.6}]
    for i, settings in enumerate(({"startup_trials": 4}, {"startup_trials": 0, "min_steps": 11},
                                  {"prune": "none"})):
        path = tmp_path / f"study{i}.log"
        watch = stops.TrialWatch(search_config(path, make_study(path, done), **settings))
        assert watch(stops.Evaluation(10, 5.0, {"perplexity": 99.0})) is None, settings
    # BLEU is maximised: 20 is worse than the median 30 of the completed trials.
    bleu = make_study(tmp_path / "bleu.log", [{10: 25.0}, {10: 30.0}, {10: 35.0}], "maximize")
    watch = stops.TrialWatch(search_config(tmp_path / "bleu.log", bleu, objective="bleu",
                                           startup_trials=0))
    assert watch(stops.Evaluation(10, 5.0, {"bleu": 20.0})).reason == "pruned"
    assert isinstance(pruners.make(search_config(path, 0, prune="asha")),
                      optuna.pruners.SuccessiveHalvingPruner)


def asha_watches(path, n, last_step=None, **settings):
    """``n`` running trials of one journal study, each with a TrialWatch pruned by asha with
    a first rung at step 10 and reduction factor 3."""
    optuna.create_study(study_name="s", storage=studies.open_storage(str(path)))
    study = optuna.load_study(study_name="s", storage=studies.open_storage(str(path)))
    numbers = [study.ask().number for _ in range(n)]
    return [stops.TrialWatch(search_config(path, number, prune="asha", min_steps=10,
                                           reduction_factor=3, **settings), last_step)
            for number in numbers]


def reached(watch, step, ppl):
    """The reason the watch stopped the run at ``step`` with perplexity ``ppl``, or None."""
    stop = watch(stops.Evaluation(step, 5.0, {"perplexity": ppl}))
    return stop and stop.reason


def test_asha_prunes_a_trial_outside_the_best_third_at_a_rung(tmp_path):
    # Optuna's rule, by hand: at rung k (step 10 x 3^k) a trial goes on iff its value is
    # within the best n // 3 of the n values that reached the rung, itself included (the
    # best one while n < 3).
    w = asha_watches(tmp_path / "study.log", 6)
    assert reached(w[0], 10, 1.50) is None  # [1.50]: the best of one
    assert reached(w[1], 10, 1.40) is None  # [1.50, 1.40]: the best of two
    assert reached(w[2], 10, 1.60) == "pruned"  # [1.50, 1.40, 1.60]: best 1 of 3 is 1.40
    assert reached(w[3], 10, 1.45) == "pruned"  # 4 values: best 1 is 1.40
    assert reached(w[4], 10, 1.39) is None  # 5 values: best 1 is 1.39, itself
    # A first report past the rung is judged at the rung: 6 values, the best 2 go on.
    assert reached(w[5], 20, 1.395) is None  # [..., 1.39, 1.395]: second best
    assert reached(w[0], 20, 9.99) is None  # rung 1 ends at step 30: nothing judged at 20
    assert reached(w[0], 30, 1.20) is None  # rung 1: [1.20], the best of one
    assert reached(w[1], 30, 1.25) == "pruned"  # [1.20, 1.25]: not the best of two
    assert reached(w[4], 30, 1.10) is None  # [1.20, 1.25, 1.10]: best 1 of 3
    # At the run's last step nothing is pruned: stopping there saves nothing.
    last = asha_watches(tmp_path / "last.log", 3, last_step=10)
    assert [reached(x, 10, v) for x, v in zip(last, (1.0, 0.9, 2.0), strict=True)] == [None] * 3


def test_asha_stops_its_reference_trials_at_the_first_rung(tmp_path):
    # The first reference_trials to reach step 10 stop there, however good; the later ones
    # are ranked against them: the first trials are stopped as well as the others.
    w = asha_watches(tmp_path / "study.log", 4, reference_trials=2)
    assert reached(w[0], 10, 1.0) == "pruned"
    assert reached(w[1], 10, 2.0) == "pruned"
    assert reached(w[2], 10, 1.5) == "pruned"  # [1.0, 2.0, 1.5]: best 1 of 3 is 1.0
    assert reached(w[3], 10, 0.9) is None  # 4 values: best 1 is 0.9
    assert reached(w[3], 20, 5.0) is None  # between rungs
    with pytest.raises(ConfigError, match=r"^search.reference_trials=2 needs search.min_steps"):
        pruners.make(search_config(tmp_path / "x.log", 0, prune="asha", reference_trials=2))
    with pytest.raises(ConfigError, match=r"^search.prune='hyperband' is not one of asha, "
                                          r"median, none"):
        stops.TrialWatch(search_config(tmp_path / "study.log", 0, prune="hyperband"))


def test_a_missing_study_or_trial_a_finished_trial_or_the_wrong_direction_is_refused(
        tmp_path):
    path = tmp_path / "study.log"
    number = make_study(path, [{10: 1.0, 20: 0.9}])
    with pytest.raises(UserError, match="search.study='nope' in search.storage=.*: no such"):
        config = search_config(path, number)
        config.study = "nope"
        stops.TrialWatch(config)
    with pytest.raises(UserError, match=r"^search.trial=7: search.study='s' .* no such trial"):
        stops.TrialWatch(search_config(path, 7))
    with pytest.raises(UserError, match="^search.trial=0 of .* is already COMPLETE"):
        stops.TrialWatch(search_config(path, 0))
    with pytest.raises(UserError, match="the study is to minimize, but search.objective='bleu' "
                                        "is better higher"):
        stops.TrialWatch(search_config(path, number, objective="bleu"))
    assert studies.direction("bleu") == "maximize"
    assert studies.direction("perplexity") == "minimize"


# ----------------------------------------------------------------------------------------
# Real runs


def restorable(config, workdir, step):
    """Whether checkpoint ``step`` of ``workdir`` restores whole, with finite values."""
    ckpts = checkpoints.Checkpoints(workdir, keep=config.train.keep_checkpoints)
    try:
        template = create_train_state(config, TransformerConfig.from_config(
            config.model, ckpts.read_meta(step)["vocab_size"]), jax.random.key(0))
        state = ckpts.restore(step, template)[0]
        return checkpoint_integrity.integrity(state)[1] and ckpts.read_meta(step)["step"] == step
    finally:
        ckpts.close()


@pytest.mark.slow
def test_a_run_whose_loss_blows_up_stops_as_diverged_and_is_not_resumed(tmp_path,
                                                                         builtin_data_dir):
    # 100 times the paper's learning rate, warmed up in 2 steps: the loss climbs from the
    # first evaluations on; the logged training losses are checked against the rule below.
    config = tiny_config(builtin_data_dir, num_steps=12, log_every=2, eval_every=2,
                         checkpoint_every=100, eval_batches=1, divergence_patience=2,
                         nonfinite="skip")
    config.optim.update(lr_scale=100.0, warmup_steps=2)
    workdir = tmp_path / "run"
    args = [*command_line(config), f"--workdir={workdir}"]
    ran = run_command("main", *args)
    losses = {r["step"]: r["loss"] for r in workdirs.read_metric_records(workdir)
              if r["split"] == "train"}
    # Steps 4 and 6 both above 1.5 x the best loss of steps 2 and 4: a stop at step 6.
    assert sorted(losses) == [2, 4, 6]
    assert min(losses[4], losses[6]) > 1.5 * losses[2], losses
    assert ran.returncode == 3, ran.stderr
    line = ran.stderr.strip().splitlines()[-1]
    assert line.startswith(f"diverged at step 6 (loss {losses[6]:.4g}, best {losses[2]:.4g}, "
                           f"threshold {1.5 * losses[2]:.4g} = 1.5 x best"), line
    assert "Traceback" not in ran.stderr
    final = json.loads((workdir / layout.FINAL_METRICS).read_text())
    assert final["step"] == 6 and final["stopped"] == {"reason": "diverged", "step": 6,
                                                       "message": line}
    assert set(final) <= {"step", "stopped", "loss", "nll", "perplexity", "tokens"}
    assert workdirs.checkpoint_steps_on_disk(workdir) == [6]
    assert restorable(config, workdir, 6)
    assert stops.stopped(workdir) == stops.Stop("diverged", 6, line)
    # The same command again: one line, the same status, nothing trained.
    again = run_command("main", *args)
    assert again.returncode == 3
    assert again.stderr.strip().splitlines()[-1] == (
        f"stopped: {line}; remove {workdir} to train it again")
    assert workdirs.last_logged_step(workdir) == 6
    assert stops.stopped(tmp_path) is None  # no run there


@pytest.mark.slow  # 12 s of one core in make test (2026-12-07)
def test_a_trial_far_worse_than_the_others_is_pruned_at_its_first_evaluation(
        tmp_path, builtin_data_dir):
    # Three completed trials at perplexity 1.0 at step 2: a fresh tiny model (perplexity
    # near its vocabulary's 200) is worse than their median.
    path = tmp_path / "study.log"
    number = make_study(path, [{2: 1.0, 4: 1.0}] * 3)
    config = tiny_config(builtin_data_dir, num_steps=4, log_every=2, eval_every=2,
                         checkpoint_every=100, eval_batches=1)
    config.search.update(storage=str(path), study="s", trial=number, prune="median",
                         startup_trials=0)
    workdir = tmp_path / "run"
    args = [*command_line(config), f"--workdir={workdir}"]
    ran = run_command("main", *args)
    assert ran.returncode == 4, ran.stderr
    final = json.loads((workdir / layout.FINAL_METRICS).read_text())
    line = ran.stderr.strip().splitlines()[-1]
    assert line == (f"pruned at step 2 (perplexity {final['perplexity']:.4g} reported to "
                    f"trial {number} of study 's'; search.prune='median')")
    assert final["perplexity"] > 1.0
    assert final["stopped"] == {"reason": "pruned", "step": 2, "message": line}
    assert workdirs.checkpoint_steps_on_disk(workdir) == [2]
    assert restorable(config, workdir, 2)
    trial = optuna.load_study(study_name="s", storage=studies.open_storage(str(path))
                              ).trials[number]
    assert trial.intermediate_values == {2: final["perplexity"]}
    again = run_command("main", *args)
    assert (again.returncode, again.stderr.strip().splitlines()[-1]) == (
        4, f"stopped: {line}; remove {workdir} to train it again")
