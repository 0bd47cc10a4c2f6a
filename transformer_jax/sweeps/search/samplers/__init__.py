"""Samplers: how a search draws its trials' values, one module a sampler, found by name.

``--search=NAME`` is the module ``transformer_jax.sweeps.search.samplers.NAME``; its ``SAMPLER`` (a
:class:`Sampler`) builds the Optuna sampler for a :class:`Budget` (the trials, the space,
the start-up trials sized to them, the search's seed). Its traits are data: ``needs`` (the
Python packages it imports: a sampler whose packages are missing is refused in one line that
says what to install) and ``categorical`` (whether it models choice dimensions). ``auto``
chooses one of the others by the budget and the space and says why.

Every sampler is wrapped in ``_optuna.Seeded``, which seeds it afresh for each trial from the
search's seed and the trial's number. Trial numbers are handed out by the study's storage,
one each, so two controllers sharing a study never draw with the same seed, and a search
re-run with the same seed draws the same values for the same trials.

Adding one is one module here (or in a directory named by the environment variable
``TRANSFORMER_JAX_SAMPLERS``) that defines ``SAMPLER``; ``--search`` offers it by its module's
name (the mechanism is :class:`transformer_jax.plugins.Registry`'s). The Optuna samplers the
entries are built from (Sobol points, start-up trials then a model) are ``_optuna.py``'s.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import optuna

from transformer_jax import plugins
from transformer_jax.errors import UserError
from transformer_jax.sweeps.search.samplers._optuna import Seeded
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


def build(name: str, budget: Budget) -> optuna.samplers.BaseSampler:
    """The study's sampler: ``name``'s, seeded for each trial (``_optuna.Seeded``)."""
    chosen = get(name)
    chosen.check(budget)
    return Seeded(lambda seed: chosen.make(seed, budget), budget.seed)
