"""Test BLEU of the translations made at the end of training."""

from transformer_jax.io import metric_keys
from transformer_jax.sweeps.report.metrics import Metric

METRIC = Metric("test BLEU", lambda run: run.final.get(metric_keys.TEST_BLEU),
                higher_is_better=True, digits=1, column=50)
