"""The last validation loss (label-smoothed cross-entropy)."""

from transformer_jax.io import metric_keys
from transformer_jax.sweeps.report.metrics import Metric

METRIC = Metric("dev loss", lambda run: run.final_value(metric_keys.LOSS),
                higher_is_better=False, digits=3, column=20, summarised=False, in_runs=False)
