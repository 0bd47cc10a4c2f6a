"""``--search=gp``: Optuna's GPSampler (Gaussian-process Bayesian optimisation, log expected
improvement) after Sobol start-up trials sized to the budget. Optuna recommends it over TPE
below a few hundred trials of numeric parameters; it needs PyTorch."""

import optuna

from transformer_jax.sweeps.search.samplers import Budget, Sampler
from transformer_jax.sweeps.search.samplers._optuna import Sobol, Staged, quiet


class Gp(Sampler):
    help = "Gaussian-process Bayesian optimisation after Sobol start-up trials (needs torch)"
    needs = ("torch", "scipy")
    categorical = False

    def make(self, seed: int, budget: Budget) -> optuna.samplers.BaseSampler:
        model = quiet(optuna.samplers.GPSampler, seed=seed, n_startup_trials=0)
        return Staged(model, budget.startup, Sobol(budget.dimensions, budget.seed))

    def describe(self, budget: Budget) -> str:
        return f"gp after {budget.startup} Sobol start-up trials of {budget.trials}"


SAMPLER = Gp()
