"""``--search=tpe``: Optuna's TPE after quasi-random start-up trials sized to the budget.

TPE is multivariate (the parameters are modelled jointly, so that values which interact,
such as a learning rate and its warmup, are sampled together) and a constant liar (a trial
still running counts as a poor one, so that controllers running trials at once do not all
sample beside the same best trial). Its start-up trials are Sobol points, not random draws.
"""

import optuna

from transformer_jax.sweeps.search.samplers import Budget, Sampler
from transformer_jax.sweeps.search.samplers._optuna import Sobol, Staged, quiet


class Tpe(Sampler):
    help = "TPE (multivariate, constant liar) after Sobol start-up trials"

    def make(self, seed: int, budget: Budget) -> optuna.samplers.BaseSampler:
        model = quiet(optuna.samplers.TPESampler, seed=seed, n_startup_trials=0,
                      multivariate=True, group=True, constant_liar=True)
        return Staged(model, budget.startup, Sobol(budget.dimensions, budget.seed))

    def describe(self, budget: Budget) -> str:
        return (f"tpe (multivariate, constant liar) after {budget.startup} Sobol start-up "
                f"trials of {budget.trials}")


SAMPLER = Tpe()
