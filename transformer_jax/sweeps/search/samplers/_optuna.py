"""The Optuna samplers a search's samplers are built from: :class:`Seeded` (a sampler seeded
afresh for each trial from the search's seed and the trial's number), :class:`Sobol`
(quasi-random points indexed by the trial's number) and :class:`Staged` (Sobol start-up
trials, then a model of the results); and :func:`quiet`, which silences Optuna's notes that
an option is experimental. Not a sampler itself (its name starts with "_")."""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from transformer_jax.sweeps.space import Dimension


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number`` of a search seeded ``seed``: distinct for each trial."""
    return int(hashlib.sha256(f"{seed}:{number}".encode()).hexdigest()[:8], 16)


def quiet(make: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``make(...)`` without Optuna's notes that an option is experimental."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return make(*args, **kwargs)


class Seeded(optuna.samplers.BaseSampler):
    """A sampler built afresh for each trial by ``factory(trial_seed(seed, number))``, so
    that no two trials, asked by one controller or several, share a seed."""

    def __init__(self, factory: Callable[[int], optuna.samplers.BaseSampler], seed: int):
        self.factory, self.seed = factory, seed
        self.inner = factory(trial_seed(seed, -1))

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.inner = self.factory(trial_seed(self.seed, trial.number))
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return quiet(self.inner.infer_relative_search_space, study, trial)

    def sample_relative(self, study: optuna.Study, trial: Any, space: dict[str, Any]
                        ) -> dict[str, Any]:
        return quiet(self.inner.sample_relative, study, trial, space)

    def sample_independent(self, study: optuna.Study, trial: Any, name: str,
                           distribution: Any) -> Any:
        return quiet(self.inner.sample_independent, study, trial, name, distribution)

    def after_trial(self, study: optuna.Study, trial: Any, state: Any,
                    values: Sequence[float] | None) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()


class Sobol(optuna.samplers.BaseSampler):
    """Quasi-random values: point ``number`` of a scrambled Sobol sequence (scipy's) over the
    space, for trial ``number``. Indexing by the trial's number, which the storage hands out
    once, keeps several controllers on one sequence without sharing a counter (optuna's
    QMCSampler counts in a study attribute that two controllers can read at once)."""

    def __init__(self, dimensions: Sequence[Dimension], seed: int):
        self.dimensions, self.seed = tuple(dimensions), seed

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return {d.field: d.distribution() for d in self.dimensions}

    def sample_relative(self, study: optuna.Study, trial: Any, space: dict[str, Any]
                        ) -> dict[str, Any]:
        from scipy.stats import qmc

        if not space:
            return {}
        engine = qmc.Sobol(len(self.dimensions), scramble=True, seed=self.seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # balance needs 2^k points
            if trial.number:
                engine.fast_forward(trial.number)
            point = engine.random(1)[0]
        return {d.field: unit_value(d, float(u)) for d, u in zip(self.dimensions, point,
                                                                 strict=True)
                if d.field in space}

    def sample_independent(self, study: optuna.Study, trial: Any, name: str,
                           distribution: Any) -> Any:
        return optuna.samplers.RandomSampler(seed=self.seed).sample_independent(
            study, trial, name, distribution)


def unit_value(dim: Dimension, u: float) -> Any:
    """The dimension's value at ``u`` in [0, 1): uniform in its range (or its log range),
    an integer rounded down, or one of its choices."""
    if dim.kind == "choice":
        return dim.choices[min(int(u * len(dim.choices)), len(dim.choices) - 1)]
    if dim.kind == "int":  # [low, high + 1) rounded down: each integer an equal share
        low, high = dim.low, dim.high + 1
    else:
        low, high = dim.low, dim.high
    if dim.log:
        value = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    else:
        value = low + u * (high - low)
    if dim.kind == "int":
        return int(min(math.floor(value), dim.high))
    return min(value, dim.high)


class Staged(optuna.samplers.BaseSampler):
    """The first ``startup`` trials (by number) from ``sobol``'s points, the rest from
    ``model``: explore quasi-randomly, then exploit with a model of the results."""

    def __init__(self, model: optuna.samplers.BaseSampler, startup: int, sobol: Sobol):
        self.model, self.startup, self.sobol = model, startup, sobol
        self.current: optuna.samplers.BaseSampler = self.sobol

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.current = self.sobol if trial.number < self.startup else self.model
        self.current.before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return self.current.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: Any, space: dict[str, Any]
                        ) -> dict[str, Any]:
        return self.current.sample_relative(study, trial, space)

    def sample_independent(self, study: optuna.Study, trial: Any, name: str,
                           distribution: Any) -> Any:
        return self.current.sample_independent(study, trial, name, distribution)

    def after_trial(self, study: optuna.Study, trial: Any, state: Any,
                    values: Sequence[float] | None) -> None:
        self.current.after_trial(study, trial, state, values)
