"""What a search is asked to do, read once from its flags: the :class:`Search` spec that the
controller, the status and the report share."""

from __future__ import annotations

import dataclasses

from transformer_jax import config as config_lib, studies
from transformer_jax.errors import UserError, shown
from transformer_jax.io import metric_keys
from transformer_jax.studies import pruners
from transformer_jax.sweeps.search import samplers

# The pruner of a search that names none: the config's (config/defaults.py), its one place.
DEFAULT_PRUNE = config_lib.base_config().search.prune
# Settings confirmed on the remaining seeds by default. Two: ranking on the mean can then
# overturn the one-seed order of the two best explored settings (one seed's dev perplexity
# moved by up to 0.02 at the demo scale, more than the gap between the grid's two best
# settings), while at three seeds a trial the confirmation costs 4 full runs, under half of
# a budget of half the demo's 18-run grid. One is a bet on its other seeds: a search's best
# at PPL 1.21 on its first seed ended at 1.65 on its second, with nothing confirmed to rank
# it against (lr_warmup_protocol_demo, 2026-12-04).
DEFAULT_CONFIRM = 2
# Fields whose higher values raise perplexity, loss and NLL while they can raise BLEU (label
# smoothing "hurts perplexity ... but improves accuracy and BLEU score", the paper's section
# 5.4): a likelihood objective ranks against them.
AGAINST_LIKELIHOOD = ("train.label_smoothing",)


@dataclasses.dataclass(frozen=True)
class Search:
    """How a sweep searches: its ``sampler`` (a module of sweeps/search/samplers/; "auto" chooses),
    ``trials`` explored, the study's ``storage`` (a SQLAlchemy URL; "" for the journal file in
    the root), the ``objective`` (metric_keys.OBJECTIVES), the ``prune`` (a module of
    studies/pruners/), the settings to ``confirm`` on the sweep's remaining seeds after
    exploring with its first (0: every trial trains every seed), and the search's ``seed``
    (None: the sweep's train.seed)."""

    sampler: str = "auto"
    trials: int = 0
    storage: str = ""
    objective: str = metric_keys.PERPLEXITY
    prune: str = DEFAULT_PRUNE
    confirm: int = DEFAULT_CONFIRM
    seed: int | None = None

    def check(self) -> None:
        samplers.get(self.sampler)
        if self.trials < 1:
            raise UserError(f"--trials={self.trials} must be >= 1")
        if self.objective not in metric_keys.OBJECTIVES:
            raise UserError(f"--objective={shown(self.objective)} is not one of "
                            f"{', '.join(metric_keys.OBJECTIVES)}")
        pruners.get(self.prune)
        if self.confirm < 0:
            raise UserError(f"--confirm={self.confirm} must be >= 0")
        if self.seed is not None and not 0 <= self.seed <= config_lib.SEED_MAX:
            # Optuna's samplers take numpy seeds: 32 bits, not negative.
            raise UserError(f"--search_seed={self.seed} must be an integer in "
                            f"[0, {config_lib.SEED_MAX:,}]")

    def caveat(self, fields: list[str]) -> str | None:
        """One line when the objective ranks against a searched field (AGAINST_LIKELIHOOD),
        else None."""
        caught = [f for f in fields if f in AGAINST_LIKELIHOOD]
        if not caught or self.objective == metric_keys.BLEU:
            return None
        return (f"{', '.join(caught)} is searched on {self.objective}, which smoothing raises "
                "while it can raise BLEU (the paper's section 5.4); --objective=bleu with "
                "--config.train.bleu_every ranks the settings on translation")

    @property
    def direction(self) -> str:
        return studies.direction(self.objective)
