"""The figures of a sweep's report, one registered entry each.

A :class:`Metric` says how its figure is computed from one run's records (:class:`Run`:
``metrics.jsonl``, ``final_metrics.json`` and the test translations it saved), whether
higher is better, and how many decimals it is shown with. The report (``python -m
transformer_jax.compare``) reads :data:`METRICS`, in order: every metric is a column of
``results.csv``; a ``summarised`` one is shown in the Settings table as mean ± std over each
setting's finished seeds and named in its line of the best settings; an ``in_runs`` one is a
column of the Runs table. Adding a figure is one :func:`register` call, here or anywhere
imported before the report is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from transformer_jax.errors import ConfigError
from transformer_jax.io import metric_keys, workdirs


@dataclasses.dataclass(frozen=True)
class Run:
    """What the report knows of one run: whether it ``finished``, its final_metrics.json
    (``final``, {} when there is none), its train and eval records of metrics.jsonl by step,
    and the (hypotheses, references) of the test split it saved when it finished."""

    finished: bool
    final: dict[str, Any]
    train: dict[int, dict[str, Any]]
    evals: dict[int, dict[str, Any]]
    translations: tuple[list[str], list[str]] | None = None
    sentence_stats: dict[str, Any] | None = None  # evaluation/sentence_stats.py's arrays

    def last_eval(self, key: str) -> Any:
        """The value of ``key`` in the latest eval record that has it (None when none)."""
        return workdirs.latest(self.evals, key)

    def final_value(self, key: str) -> Any:
        """``key`` of final_metrics.json when the run finished, else the latest eval
        record's: the last validation figure."""
        if self.finished and self.final.get(metric_keys.PERPLEXITY):
            return self.final.get(key)
        return self.last_eval(key)


@dataclasses.dataclass(frozen=True)
class Metric:
    """A figure of the report: ``name`` (its results.csv column), ``heading`` (its column in
    results.md), ``compute`` (from a :class:`Run`; None when the run has no such figure),
    ``higher_is_better``, ``digits`` (decimals shown), ``summarised`` (mean ± std in the
    Settings table) and ``in_runs`` (a column of the Runs table)."""

    name: str
    heading: str
    compute: Callable[[Run], float | None]
    higher_is_better: bool
    digits: int
    summarised: bool = True
    in_runs: bool = True


METRICS: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Adds ``metric`` to the report, after those already there."""
    METRICS[metric.name] = metric
    return metric


def get(name: str) -> Metric:
    """The metric called ``name``; ConfigError naming the known ones for another name."""
    if name not in METRICS:
        raise ConfigError(f"report metric {name!r} is not one of {', '.join(METRICS)}")
    return METRICS[name]


def summarised() -> list[Metric]:
    return [m for m in METRICS.values() if m.summarised]


def in_runs() -> list[Metric]:
    return [m for m in METRICS.values() if m.in_runs]


def _tokens_per_s(run: Run) -> float | None:
    """Target tokens/s of the log windows after the first, which includes compilation."""
    speeds = [run.train[s][metric_keys.TOKENS_PER_S] for s in sorted(run.train)
              if metric_keys.TOKENS_PER_S in run.train[s]]
    speeds = speeds[1:] or speeds
    return sum(speeds) / len(speeds) if speeds else None


def _chrf(run: Run) -> float | None:
    """sacreBLEU's chrF of the test translations saved at the end of training (from their
    sentence statistics)."""
    from transformer_jax.evaluation import sentence_stats

    return sentence_stats.figure(run.sentence_stats, sentence_stats.CHRF)


# The figures, in the order of their columns.
register(Metric("tokens_per_s", "tokens/s", _tokens_per_s, higher_is_better=True, digits=0,
                summarised=False))
register(Metric("dev_loss", "dev loss", lambda run: run.final_value(metric_keys.LOSS),
                higher_is_better=False, digits=3, summarised=False, in_runs=False))
register(Metric("dev_ppl", "dev PPL", lambda run: run.final_value(metric_keys.PERPLEXITY),
                higher_is_better=False, digits=2))
register(Metric("dev_bleu", "dev BLEU", lambda run: run.last_eval(metric_keys.BLEU),
                higher_is_better=True, digits=1))
register(Metric("test_bleu", "test BLEU", lambda run: run.final.get(metric_keys.TEST_BLEU),
                higher_is_better=True, digits=1))
register(Metric("test_chrf", "test chrF", _chrf, higher_is_better=True, digits=1))
