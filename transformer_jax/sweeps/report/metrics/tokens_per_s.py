"""Training speed: target tokens/s of the log windows after the first, which includes
compilation."""

from transformer_jax.io import metric_keys
from transformer_jax.sweeps.report.metrics import Metric, Run


def tokens_per_s(run: Run) -> float | None:
    speeds = [run.train[s][metric_keys.TOKENS_PER_S] for s in sorted(run.train)
              if metric_keys.TOKENS_PER_S in run.train[s]]
    speeds = speeds[1:] or speeds
    return sum(speeds) / len(speeds) if speeds else None


METRIC = Metric("tokens/s", tokens_per_s, higher_is_better=True, digits=0, column=10,
                summarised=False)
