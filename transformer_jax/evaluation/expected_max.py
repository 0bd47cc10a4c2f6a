"""The expected best of n trials, from the trials a search or a grid actually ran.

Dodge, Gururangan, Card, Schwartz and Smith (2019), "Show Your Work: Improved Reporting of
Experimental Results" (EMNLP), section 3: given N finished trials whose results, sorted from
worst to best, are v_(1), ..., v_(N), the best of n trials drawn with replacement from their
empirical distribution is v_(i) with probability (i/N)^n - ((i-1)/N)^n, so

    E[max_n] = sum_i v_(i) [(i/N)^n - ((i-1)/N)^n]

(the minimum where lower is better, as for perplexity: the same sum over the order from the
highest value down). Plotted against the compute of n trials it says what a budget buys, and
at which budget one search procedure overtakes another. The variance comes with the same
weights, E[max_n^2] - E[max_n]^2.

A trial can be selected on one figure and reported on another (chosen on validation
perplexity, reported by test BLEU): the report is that of the trial best by the selection.
Trials tied on the selection are broken uniformly at random, so a tied group's probability
goes to the mean of its reports. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transformer_jax.errors import UserError


def _finite(name: str, values: Sequence[float]) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise UserError(f"expected best: {name} must be a non-empty list of numbers, got shape "
                        f"{a.shape}")
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise UserError(f"expected best: {name}[{bad[0]}] is {a[bad[0]]}, not a finite number")
    return a


def expected_best(selection: Sequence[float], n: int, report: Sequence[float] | None = None,
                  *, lower_is_better: bool = False) -> tuple[float, float]:
    """(mean, standard deviation) of the best of ``n`` trials drawn with replacement from the
    N trials' ``selection`` figures (the report of the selected trial where ``report``, one
    figure a trial, is given).

    ``selection`` and ``report``: 1-D, length N, finite. ``n``: an integer >= 1 (it may exceed
    N: draws are with replacement). ``lower_is_better`` for figures such as perplexity.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UserError(f"expected best: n must be an integer >= 1, got {n!r}")
    sel = _finite("selection", selection)
    rep = sel if report is None else _finite("report", report)
    if rep.shape != sel.shape:
        raise UserError(f"expected best: report has {rep.size} values, selection {sel.size}")
    key = -sel if lower_is_better else sel
    order = np.argsort(key, kind="stable")  # worst first
    key, rep = key[order], rep[order]
    size = sel.size
    i = np.arange(1, size + 1)
    weight = (i / size) ** n - ((i - 1) / size) ** n
    _, group, counts = np.unique(key, return_inverse=True, return_counts=True)
    first = np.bincount(group, weights=rep) / counts
    second = np.bincount(group, weights=rep ** 2) / counts
    mean = float(np.sum(weight * first[group]))
    var = float(np.sum(weight * second[group])) - mean ** 2
    return mean, float(np.sqrt(max(var, 0.0)))


def curve(selection: Sequence[float], ns: Sequence[int], report: Sequence[float] | None = None,
          *, lower_is_better: bool = False) -> list[tuple[int, float, float]]:
    """[(n, mean, std)] of :func:`expected_best` for each ``n`` of ``ns``."""
    return [(int(n), *expected_best(selection, n, report, lower_is_better=lower_is_better))
            for n in ns]
