"""``--search=qmc``: every trial a point of a scrambled Sobol sequence (quasi-random search,
which covers the space more evenly than random draws; the tuning playbook's exploration)."""

import optuna

from transformer_jax.sweeps.search.samplers import Budget, Sampler
from transformer_jax.sweeps.search.samplers._optuna import Sobol


class QuasiRandom(Sampler):
    help = "quasi-random Sobol points, one a trial number"

    def make(self, seed: int, budget: Budget) -> optuna.samplers.BaseSampler:
        return Sobol(budget.dimensions, budget.seed)  # one sequence for the whole search


SAMPLER = QuasiRandom()
