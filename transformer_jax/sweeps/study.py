"""A search's study: where it is kept, opening it, and the trials' records in it, claims
included.

The study (named after the sweep) is in ``ROOT/study.journal`` (Optuna's journal file) or in
the database of ``--storage``. A bucket cannot lock a journal file, so a search rooted in one
needs ``--storage`` (training/studies.py says so in one line).

Each trial records in its user attributes what the controller needs to share it with others:
its ``phase`` (exploring or confirming), the trial number its workdirs are ``named`` after,
the ``seed_index`` of a confirmation run, its ``points`` (workdir names), and the ``claim`` of
the controller running it (host, process, heartbeat, as a workdir's hold). Claims are decided
by the storage, never by reading back what was written:

* a new trial is asked (the storage hands out each number once), or a WAITING trial is
  popped, which the storage moves to RUNNING for one caller only (a database transaction; in
  the journal file, the first of the appended operations);
* a running trial whose controller is gone is *retired*: told FAIL, which the storage accepts
  once (the others get UpdateFinishedTrialError), and the one controller that retired it
  enqueues its copy (same values and attributes) as a WAITING trial, to be popped as above.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import optuna

from transformer_jax.errors import UserError
from transformer_jax.io import layout, storage, workdirs
from transformer_jax.training import studies

# How often a controller renews the heartbeat of the trials it runs, and polls a scheduler.
HEARTBEAT_S = workdirs.HEARTBEAT_S
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
    """This controller, as a workdir's hold names its run (workdirs.hold_is_live)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": workdirs.now(),
            "heartbeat": workdirs.now()}


def abandoned(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether a running trial's controller is gone (a trial just asked, not yet claimed,
    is not)."""
    held = trial.user_attrs.get(CLAIM)
    if held is None:
        started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
        return time.time() - started > HEARTBEAT_S
    return not workdirs.hold_is_live(held)


def set_attr(study: optuna.Study, number: int, key: str, value: Any) -> None:
    """Sets a user attribute of trial ``number``."""
    store = study._storage
    trial_id = store.get_trial_id_from_study_id_trial_number(study._study_id, number)
    store.set_trial_user_attr(trial_id, key, value)


def retire(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
    """Tells an abandoned trial FAIL and, when this call was the one the storage accepted,
    enqueues its copy to be popped by the next ask; whether it did."""
    try:
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False  # another controller retired it first
    except ValueError as e:  # optuna's "already finished" before it reaches the storage
        logging.info("trial %d: %s", trial.number, e)
        return False
    attrs = {k: trial.user_attrs[k] for k in KEPT if k in trial.user_attrs}
    study.enqueue_trial(trial.params, user_attrs={**attrs, RETRY_OF: trial.number},
                        skip_if_exists=False)
    return True


def phase(trial: optuna.trial.FrozenTrial) -> str:
    return trial.user_attrs.get(PHASE, EXPLORE)


def named(trial: optuna.trial.FrozenTrial) -> int:
    return int(trial.user_attrs.get(NAMED, trial.number))


def live(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials that count: all but those told FAIL (retired, dropped, or failed)."""
    return [t for t in trials if t.state != optuna.trial.TrialState.FAIL]
