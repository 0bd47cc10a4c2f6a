"""The last validation BLEU logged during training."""

from transformer_jax.io import metric_keys
from transformer_jax.sweeps.report.metrics import Metric

METRIC = Metric("dev BLEU", lambda run: run.last_eval(metric_keys.BLEU),
                higher_is_better=True, digits=1, column=40)
