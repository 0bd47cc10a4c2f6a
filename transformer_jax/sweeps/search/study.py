"""A search's study: where it is kept, opening it, and the trials' records in it, claims
included.

The study (named after the sweep) is in ``ROOT/study.journal`` (Optuna's journal file) or in
the database of ``--storage``. A bucket cannot lock a journal file, so a search rooted in one
needs ``--storage`` (studies/__init__.py says so in one line).

Each trial records in its user attributes what the controller needs to share it with others:
its ``phase`` (exploring or confirming), the trial number its workdirs are ``named`` after,
the ``seed_index`` of a confirmation run, its ``points`` (workdir names), and the ``claim`` of
the controller running it (host, process, heartbeat, as a workdir's hold). Claims are decided
by the storage, never by reading back what was written:

* a new trial is asked (the storage hands out each number once), or a WAITING trial is
  popped, which the storage moves to RUNNING for one caller only (a database transaction; in
  the journal file, the first of the appended operations);
* a running trial whose controller is gone is *retired*: its copy (same values and
  attributes, and ``retry_of``) is enqueued as a WAITING trial, to be popped as above, and
  then it is told FAIL. The copy goes first so that no controller ever counts the trial gone
  (told FAIL) before its copy is there, and asks a new trial in its place. Controllers that
  retire one trial at once each enqueue a copy; the controller that pops a copy runs it only
  if its original ended FAIL (it tells it so when the retirer stopped between the two steps)
  and no lower-numbered copy of it is live (controller.py drops the others as duplicates).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import optuna

from transformer_jax import studies
from transformer_jax.errors import UserError
from transformer_jax.io import holds, layout, storage, workdirs

# How often a controller renews the heartbeat of the trials it runs, and polls a scheduler.
HEARTBEAT_S = holds.HEARTBEAT_S
CLAIM = "controller"  # the controller that runs the trial
POINTS = "points"  # its workdirs' names
PHASE = "phase"  # EXPLORE or CONFIRM
NAMED = "named"  # the trial number its workdirs are named after (its own, or the explored one)
SEED_INDEX = "seed_index"  # a confirmation run's point among the sweep's seeds
DROPPED = "dropped"  # why a trial was told FAIL without running: surplus, duplicate
RETRY_OF = "retry_of"  # the trial this one takes over from a controller that is gone
STOPPED = "stopped"  # pruned or diverged: how the run that made the trial PRUNED ended
EXPLORE, CONFIRM = "explore", "confirm"
# Attributes a retried trial keeps.
KEPT = (POINTS, PHASE, NAMED, SEED_INDEX)


def storage_url(root: str, storage_flag: str = "") -> str:
    """Where the study is: ``--storage``, or the journal file in the root."""
    return storage_flag or os.path.join(root, layout.STUDY_JOURNAL)


def check_url(url: str) -> None:
    """UserError in one line for a study that cannot be kept where ``url`` says (a journal
    file in a bucket)."""
    refused = studies.bucket_journal(url)
    if refused:
        raise UserError(f"a search rooted in a bucket: {refused}")


def open_study(name: str, url: str, direction: str, sampler: optuna.samplers.BaseSampler,
               store: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """The study ``name`` in ``url`` (opened, or ``store``), created when missing; UserError
    when it exists with another direction."""
    study = optuna.create_study(storage=store or studies.open_storage(url), study_name=name,
                                sampler=sampler, direction=direction, load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise UserError(f"the study {name} in {url} is to {study.direction.name.lower()} its "
                        f"objective, this search to {direction}; use another --root or "
                        "--storage")
    return study


def load_study(name: str, url: str, store: optuna.storages.BaseStorage | None = None
               ) -> optuna.Study | None:
    """The study ``name`` in ``url`` (opened, or ``store``), or None when there is none."""
    if store is None and not studies.is_database(url) and (
            storage.is_remote(url) or not storage.path(url).exists()):
        return None
    try:
        return optuna.load_study(study_name=name, storage=store or studies.open_storage(url))
    except KeyError:
        return None


def claim() -> dict[str, Any]:
    """This controller, as a workdir's hold names its run (holds.hold_is_live)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": workdirs.now(),
            "heartbeat": workdirs.now()}


def abandoned(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a running trial's controller is gone (a trial just asked, not yet claimed,
    is not)."""
    held = trial.user_attrs.get(CLAIM)
    if held is None:
        started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
        return time.time() - started > HEARTBEAT_S
    return not holds.hold_is_live(held)


def set_attr(study: optuna.Study, number: int, key: str, value: Any) -> None:
    """Sets a user attribute of trial ``number``."""
    store = study._storage
    trial_id = store.get_trial_id_from_study_id_trial_number(study._study_id, number)
    store.set_trial_user_attr(trial_id, key, value)


def retire(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
    """Enqueues an abandoned trial's copy, then tells the trial FAIL; whether this call's
    FAIL was the one the storage accepted (the copy stays queued either way: see ``copy_runs``
    for which copy runs)."""
    attrs = {k: trial.user_attrs[k] for k in KEPT if k in trial.user_attrs}
    study.enqueue_trial(trial.params, user_attrs={**attrs, RETRY_OF: trial.number},
                        skip_if_exists=False)
    return end_original(study, trial.number)


def end_original(study: optuna.Study, number: int) -> bool:
    """Tells trial ``number`` FAIL; whether the storage accepted it from this call."""
    try:
        study.tell(number, state=optuna.trial.TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False  # another controller retired it first, or it ended
    except ValueError as e:  # optuna's "already finished" before it reaches the storage
        logging.info("trial %d: %s", number, e)
        return False
    return True


def copy_runs(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
    """Whether the just-popped ``trial``, a copy of a retired one, is the copy to run: its
    original ended FAIL (told so here if its retirer stopped before doing it) and no
    lower-numbered copy of the same original is live. Otherwise it duplicates work."""
    original = trial.user_attrs[RETRY_OF]
    store = study._storage

    def state() -> optuna.trial.TrialState:
        return store.get_trial(store.get_trial_id_from_study_id_trial_number(
            study._study_id, original)).state

    if state() == optuna.trial.TrialState.RUNNING:
        end_original(study, original)
    if state() != optuna.trial.TrialState.FAIL:
        return False  # its controller was alive after all, and ended it
    return not any(t.number < trial.number and t.user_attrs.get(RETRY_OF) == original
                   for t in live(study.get_trials(deepcopy=False)))


def phase(trial: optuna.trial.FrozenTrial) -> str:
    return trial.user_attrs.get(PHASE, EXPLORE)


def named(trial: optuna.trial.FrozenTrial) -> int:
    return int(trial.user_attrs.get(NAMED, trial.number))


def live(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials that count: all but those told FAIL (retired, dropped, or failed)."""
    return [t for t in trials if t.state != optuna.trial.TrialState.FAIL]
