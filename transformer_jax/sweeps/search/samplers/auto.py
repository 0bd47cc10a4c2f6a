"""``--search=auto`` (the default): a sampler chosen by the budget and the space, as Optuna's
own advice has it. Below GP_TRIALS trials of numeric parameters a Gaussian process models a
few points best (Optuna's sampler table, OptunaHub's AutoSampler); with choice dimensions, a
larger budget, or no PyTorch installed, TPE. The choice and its reason are one line, logged
when the search starts and recorded with it."""

import optuna

from transformer_jax.sweeps.search.samplers import Budget, Sampler, get

GP_TRIALS = 250  # OptunaHub's AutoSampler's bound for GPSampler on one objective


class Auto(Sampler):
    help = "gp below 250 trials of numeric parameters where PyTorch is installed, else tpe"

    def choose(self, budget: Budget) -> tuple[str, str]:
        """(the sampler's name, why)."""
        if budget.categorical:
            return "tpe", "the space has choice dimensions, which TPE models"
        if budget.trials >= GP_TRIALS:
            return "tpe", f"{budget.trials} trials are past a Gaussian process's few hundred"
        missing = get("gp").missing()
        if missing:
            return "tpe", (f"a Gaussian process suits {budget.trials} trials of numeric "
                           f"parameters, but needs {', '.join(missing)} (not installed)")
        return "gp", f"{budget.trials} trials of numeric parameters: a Gaussian process"

    def make(self, seed: int, budget: Budget) -> optuna.samplers.BaseSampler:
        return get(self.choose(budget)[0]).make(seed, budget)

    def describe(self, budget: Budget) -> str:
        name, why = self.choose(budget)
        return f"auto chose {get(name).describe(budget)}: {why}"


SAMPLER = Auto()
