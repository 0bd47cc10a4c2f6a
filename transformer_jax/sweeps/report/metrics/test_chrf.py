"""sacreBLEU's chrF of the test translations saved at the end of training (from their
sentence statistics)."""

from transformer_jax.sweeps.report.metrics import Metric, Run


def chrf(run: Run) -> float | None:
    from transformer_jax.evaluation import sentence_stats

    return sentence_stats.figure(run.sentence_stats, sentence_stats.CHRF)


METRIC = Metric("test chrF", chrf, higher_is_better=True, digits=1, column=60)
