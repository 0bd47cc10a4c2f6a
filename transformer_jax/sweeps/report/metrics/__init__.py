"""The figures of a sweep's report, one module each: the entries of this package, and of the
directories ``TRANSFORMER_JAX_REPORT_METRICS`` names, each defining ``METRIC``, a
:class:`Metric`.

A :class:`Metric` says how its figure is computed from one run's records (:class:`Run`:
``metrics.jsonl``, ``final_metrics.json`` and the test translations it saved), whether
higher is better, how many decimals it is shown with, and its ``column``: the report
(``python -m transformer_jax.compare``) reads :func:`ordered`, the metrics by column, every
one a column of ``results.csv``; a ``summarised`` one is shown in the Settings table as mean
± std over each setting's finished seeds and named in its line of the best settings; an
``in_runs`` one is a column of the Runs table. Adding a figure is one module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from transformer_jax import plugins
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
    """A figure of the report: ``heading`` (its column in results.md), ``compute`` (from a
    :class:`Run`; None when the run has no such figure), ``higher_is_better``, ``digits``
    (decimals shown), ``column`` (where its columns go: the metrics are in the order of their
    ``column``, the name breaking a tie), ``summarised`` (mean ± std in the Settings table)
    and ``in_runs`` (a column of the Runs table). Its ``name``, the results.csv column, is
    its module's."""

    heading: str
    compute: Callable[[Run], float | None]
    higher_is_better: bool
    digits: int
    column: int
    summarised: bool = True
    in_runs: bool = True
    name: str = ""


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_REPORT_METRICS", "report metric",
    needs=(plugins.Need("METRIC", Metric),),
    make=lambda entry: dataclasses.replace(entry.module.METRIC, name=entry.name))
names, get = REGISTRY.names, REGISTRY.get


def ordered() -> list[Metric]:
    """Every metric, in the order of its columns."""
    return sorted((get(name) for name in names()), key=lambda m: (m.column, m.name))


def summarised() -> list[Metric]:
    return [m for m in ordered() if m.summarised]


def in_runs() -> list[Metric]:
    return [m for m in ordered() if m.in_runs]
