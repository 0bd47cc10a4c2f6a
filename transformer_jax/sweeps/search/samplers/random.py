"""``--search=random``: every trial drawn at random (the baseline a search should beat)."""

import optuna

from transformer_jax.sweeps.search.samplers import Budget, Sampler


class Random(Sampler):
    help = "uniform random draws (a baseline)"

    def make(self, seed: int, budget: Budget) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)


SAMPLER = Random()
