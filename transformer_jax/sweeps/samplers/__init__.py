"""Samplers: how a search draws its trials' values, one module a sampler, found by name.

``--search=NAME`` is the module ``transformer_jax.sweeps.samplers.NAME``; its ``SAMPLER`` (a
:class:`Sampler`) builds the Optuna sampler for a :class:`Budget` (the trials, the space,
the start-up trials sized to them, the search's seed). Its traits are data: ``needs`` (the
Python packages it imports: a sampler whose packages are missing is refused in one line that
says what to install) and ``categorical`` (whether it models choice dimensions). ``auto``
chooses one of the others by the budget and the space and says why.

Every sampler is wrapped in :class:`Seeded`, which seeds it afresh for each trial from the
search's seed and the trial's number. Trial numbers are handed out by the study's storage,
one each, so two controllers sharing a study never draw with the same seed, and a search
re-run with the same seed draws the same values for the same trials.

Adding one is one module here (or in a directory named by the environment variable
``TRANSFORMER_JAX_SAMPLERS``) that defines ``SAMPLER``; ``--search`` offers it by its module's
name (the mechanism is :class:`transformer_jax.plugins.Registry`'s).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from transformer_jax import plugins
from transformer_jax.errors import UserError
from transformer_jax.sweeps.space import Dimension

# Start-up trials: a quarter of the budget, so that most trials are guided by the model, but
# at least one more than the dimensions (a model over d parameters needs d + 1 points to fit
# anything) and at most 10, Optuna's own default for budgets of hundreds of trials.
MAX_STARTUP = 10


@dataclasses.dataclass(frozen=True)
class Budget:
    """What a sampler is sized to: ``trials`` to explore over ``dimensions``, of which the
    first ``startup`` are drawn quasi-randomly; ``seed`` the search's."""

    trials: int
    dimensions: tuple[Dimension, ...]
    seed: int = 0

    @property
    def startup(self) -> int:
        return min(self.trials, MAX_STARTUP, max(len(self.dimensions) + 1, self.trials // 4))

    @property
    def categorical(self) -> bool:
        return any(d.kind == "choice" for d in self.dimensions)


class Sampler:
    """A sampler's traits and its ``make``: ``help`` (one line), ``needs`` (modules it
    imports), ``categorical`` (whether it models choice dimensions). ``name`` is its
    module's name."""

    help: str = ""
    needs: tuple[str, ...] = ()
    categorical: bool = True

    @property
    def name(self) -> str:
        return type(self).__module__.rpartition(".")[2]

    def missing(self) -> list[str]:
        """The packages of ``needs`` this Python cannot import."""
        return [m for m in self.needs if importlib.util.find_spec(m) is None]

    def check(self, budget: Budget) -> None:
        """UserError in one line when the sampler cannot run here or on this space."""
        missing = self.missing()
        if missing:
            raise UserError(f"--search={self.name} needs {', '.join(missing)}: pip install "
                            f"{' '.join(missing)} (or use --search=auto)")
        if budget.categorical and not self.categorical:
            raise UserError(f"--search={self.name} does not model choice dimensions; use "
                            "--search=tpe")

    def make(self, seed: int, budget: Budget) -> optuna.samplers.BaseSampler:
        """The Optuna sampler for one trial, seeded with ``seed``."""
        raise NotImplementedError

    def describe(self, budget: Budget) -> str:
        """One line: what this sampler does with the budget."""
        return f"{self.name} ({self.help})"


REGISTRY = plugins.Registry(__name__, "TRANSFORMER_JAX_SAMPLERS", "--search", traits="SAMPLER",
                            needs=(plugins.Need("SAMPLER", Sampler),),
                            make=lambda entry: entry.traits)
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having


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
    """The first ``startup`` trials (by number) from Sobol points, the rest from ``model``:
    explore quasi-randomly, then exploit with a model of the results."""

    def __init__(self, model: optuna.samplers.BaseSampler, budget: Budget, seed: int):
        self.model, self.startup = model, budget.startup
        self.sobol = Sobol(budget.dimensions, budget.seed)
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


def build(name: str, budget: Budget) -> optuna.samplers.BaseSampler:
    """The study's sampler: ``name``'s, seeded for each trial (:class:`Seeded`)."""
    chosen = get(name)
    chosen.check(budget)
    return Seeded(lambda seed: chosen.make(seed, budget), budget.seed)
