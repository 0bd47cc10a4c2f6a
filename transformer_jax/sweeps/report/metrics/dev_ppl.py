"""The last validation perplexity (per target token, without label smoothing)."""

from transformer_jax.io import metric_keys
from transformer_jax.sweeps.report.metrics import Metric

METRIC = Metric("dev PPL", lambda run: run.final_value(metric_keys.PERPLEXITY),
                higher_is_better=False, digits=2, column=30)
