"""Whether two settings differ: the run-level statistics behind every verdict the project
prints (the comparison report, table3.md, BLEU by length, the kernels, search against grid).

The unit of replication is the training run. Each run is known by the sufficient statistics
of its sentences (:mod:`transformer_jax.evaluation.sentence_stats`): an array ``[runs,
sentences, K]`` a side, every run scored on the same sentences, and a ``score`` function from
statistics summed over sentences (``[..., K]``) to the figure (BLEU, chrF, perplexity).

For settings ``a`` and ``b``, Δ is the mean of a's runs' figures minus the mean of b's, each
run's figure on the whole test set. Two components of the variance of Δ are estimated and
both reported, as Clark et al. (2011, "Better hypothesis testing for statistical machine
translation") ask:

* **between runs** (the optimiser's variance: initialisation, data order, dropout): paired
  when both sides ran the same seeds (seed s against seed s: the same data order and
  initialisation), the sample variance of the per-seed differences over n (n - 1 degrees
  of freedom); unpaired, Welch's s_a^2 / n_a + s_b^2 / n_b. On a fixed test set this is
  the whole variance a rerun of the runs would show;
* **test set** (the variance over test sets drawn like this one): B bootstrap resamples of
  the sentences (Koehn, 2004), one resample shared by every run, give each run's figure on
  each resample. A run's own sentence-level noise is independent between runs and already
  in the between-run variance; the part of the test set common to all runs is the
  *covariance between different runs' replicates*. So V_test = C_aa + C_bb - 2 C_ab, each
  C the mean covariance over pairs of distinct runs (for a paired design, pairs of distinct
  seeds), a method-of-moments estimate in the manner of a two-way random-effects analysis
  of variance (runs x sentences), clipped at 0.

V = V_run + V_test; t = Δ / sqrt(V) with Satterthwaite's (1946) degrees of freedom (the
run terms n - 1, the test set's S - 1); p two-sided from Student's t; the interval Δ ± t
sqrt(V). The p comes from the t distribution, so it has no resampling floor. Across the
comparisons of one report :func:`adjust` applies Holm's (1979) step-down adjustment: the
verdict is the adjusted p's, and each interval is drawn at the matching Bonferroni level
1 - alpha / m. The bootstrap's generator is seeded, so a table recomputes to the same
digits. ``tests/evaluation/test_significance.py`` checks the false-positive rate and the
power on simulated experiments with known variance components.

Both sides need two runs at least: with one run the between-run variance is unknown and no
verdict is given (:class:`Comparison` ``p`` None and a ``note``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ALPHA = 0.05
POWER = 0.8
BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 2011  # fixed: a report recomputes to the same digits
MAX_RUNS = 1000  # the most runs a side :func:`runs_needed` looks at

Score = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One figure of setting a against setting b.

    ``delta`` = mean(a) - mean(b); ``sd_a``, ``sd_b`` the runs' standard deviations;
    ``se_run`` and ``se_test`` the standard errors of Δ from the two variance components
    (between runs, test set), ``se`` their root sum of squares; ``df`` Satterthwaite's
    degrees of freedom; ``p`` two-sided. After :func:`adjust`: ``p_adjusted`` (Holm),
    ``level`` (the interval's coverage), ``low``/``high`` the interval, ``significant``
    (adjusted p < alpha) and ``runs_needed`` (runs a side that would resolve this Δ at 80%
    power, None when resolved or unreachable, see ``note``)."""

    delta: float
    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    paired: bool
    sd_a: float | None = None
    sd_b: float | None = None
    se_run: float | None = None
    se_test: float | None = None
    se: float | None = None
    df: float | None = None
    p: float | None = None
    sentences: int = 0
    p_adjusted: float | None = None
    level: float = 1 - ALPHA
    low: float | None = None
    high: float | None = None
    significant: bool = False
    runs_needed: int | None = None
    note: str = ""

    @property
    def judged(self) -> bool:
        return self.p is not None


def _t():
    from scipy import stats  # scipy only where a test is computed

    return stats.t


def interval(c: Comparison, level: float) -> tuple[float, float]:
    """Δ ± t_{df, (1 + level) / 2} se."""
    if c.se is None or c.df is None:
        return (math.nan, math.nan)
    half = float(_t().ppf(0.5 + level / 2, c.df)) * c.se
    return c.delta - half, c.delta + half


def _weights(sentences: int, samples: int, seed: int) -> np.ndarray:
    """[samples, sentences] counts of each sentence in each bootstrap resample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(sentences, np.full(sentences, 1.0 / sentences), size=samples)


def _mean_cov(cov: np.ndarray, rows: Sequence[int], cols: Sequence[int],
              excluded: set[tuple[int, int]]) -> float:
    """Mean of ``cov[i, j]`` over i in rows, j in cols, i != j and (i, j) not excluded."""
    values = [cov[i, j] for i in rows for j in cols if i != j and (i, j) not in excluded]
    return float(np.mean(values)) if values else 0.0


def compare(a: np.ndarray, b: np.ndarray, score: Score, seeds_a: Sequence[Any] | None = None,
            seeds_b: Sequence[Any] | None = None, samples: int = BOOTSTRAP_SAMPLES,
            seed: int = BOOTSTRAP_SEED) -> Comparison:
    """Setting ``a`` against setting ``b`` (each ``[runs, sentences, K]`` sentence
    statistics on the same sentences) on the figure ``score``; paired when ``seeds_a`` and
    ``seeds_b`` hold the same seeds (the runs are then matched by seed), unpaired otherwise.
    The comparison is unadjusted, its interval at 95%: see :func:`adjust`."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 3 or b.ndim != 3 or a.shape[1:] != b.shape[1:]:
        raise ValueError(f"sentence statistics of shapes {a.shape} and {b.shape} do not "
                         "compare: [runs, sentences, K] of the same sentences")
    seeds_a = list(seeds_a) if seeds_a is not None else list(range(len(a)))
    seeds_b = list(seeds_b) if seeds_b is not None else [("b", i) for i in range(len(b))]
    paired = sorted(map(str, seeds_a)) == sorted(map(str, seeds_b)) and len(seeds_a) > 0
    if paired:  # match the runs by seed
        order = [seeds_b.index(s) for s in seeds_a]
        b, seeds_b = b[order], [seeds_b[i] for i in order]
    fa, fb = score(a.sum(axis=1)), score(b.sum(axis=1))
    na, nb, sentences = len(a), len(b), a.shape[1]
    base = Comparison(delta=float(fa.mean() - fb.mean()), mean_a=float(fa.mean()),
                      mean_b=float(fb.mean()), n_a=na, n_b=nb, paired=paired,
                      sd_a=float(fa.std(ddof=1)) if na > 1 else None,
                      sd_b=float(fb.std(ddof=1)) if nb > 1 else None, sentences=sentences)
    if na < 2 or nb < 2:
        return dataclasses.replace(base, note="one run a side: the spread between runs is "
                                   "unknown, so no verdict")
    if paired:
        d = fa - fb
        terms = [(float(d.var(ddof=1)) / na, na - 1)]
    else:
        terms = [(float(fa.var(ddof=1)) / na, na - 1), (float(fb.var(ddof=1)) / nb, nb - 1)]
    v_run = sum(v for v, _ in terms)

    w = _weights(sentences, samples, seed).astype(np.float64)
    replicates = score(np.einsum("bs,rsk->brk", w, np.concatenate([a, b])))  # [B, runs]
    cov = np.cov(replicates, rowvar=False)
    ia, ib = list(range(na)), list(range(na, na + nb))
    same_seed = {(i, na + i) for i in ia} | {(na + i, i) for i in ia} if paired else set()
    v_test = max(0.0, _mean_cov(cov, ia, ia, set()) + _mean_cov(cov, ib, ib, set())
                 - 2 * _mean_cov(cov, ia, ib, same_seed))
    total = v_run + v_test
    if total <= 0:  # identical runs, identical sentences: nothing varies
        p = 1.0 if base.delta == 0 else 0.0
        return dataclasses.replace(base, se_run=0.0, se_test=0.0, se=0.0, df=math.inf, p=p)
    df = _satterthwaite(terms, v_test, sentences)
    se = math.sqrt(total)
    p = float(2 * _t().sf(abs(base.delta) / se, df))
    c = dataclasses.replace(base, se_run=math.sqrt(v_run), se_test=math.sqrt(v_test), se=se,
                            df=df, p=p)
    low, high = interval(c, 1 - ALPHA)
    return dataclasses.replace(c, low=low, high=high, significant=p < ALPHA)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (statsmodels' multipletests), in the given order."""
    from statsmodels.stats.multitest import multipletests

    if not p_values:
        return []
    return [float(x) for x in multipletests(list(p_values), method="holm")[1]]


def adjust(comparisons: Sequence[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """The comparisons of one report, adjusted together: Holm's p, the verdict from it, each
    interval at the Bonferroni level 1 - alpha / m, and the runs a side an unresolved one
    needs (80% power at its Δ, at level alpha / m). Those without a p pass unchanged and do
    not count in m."""
    judged = [c for c in comparisons if c.judged]
    m = len(judged)
    adjusted = iter(holm([c.p for c in judged]))
    out = []
    for c in comparisons:
        if not c.judged:
            out.append(c)
            continue
        level = 1 - alpha / m
        p_adj = next(adjusted)
        low, high = interval(c, level)
        c = dataclasses.replace(c, p_adjusted=p_adj, level=level, low=low, high=high,
                                significant=p_adj < alpha)
        if not c.significant:
            needed, why = runs_needed(c, alpha / m)
            c = dataclasses.replace(c, runs_needed=needed, note=why)
        out.append(c)
    return out


def _satterthwaite(terms: Sequence[tuple[float, int]], v_test: float, sentences: int) -> float:
    """Satterthwaite's degrees of freedom of the sum of the run terms (variance, df) and the
    test set's share (S - 1 df), which is not 0."""
    total = sum(v for v, _ in terms) + v_test
    return total ** 2 / (sum(v ** 2 / k for v, k in terms) + v_test ** 2 / max(sentences - 1, 1))


def _se_at(c: Comparison, n: int) -> tuple[float, float]:
    """(standard error, df) of Δ with n runs a side, the variance components as measured
    (the test set's share does not shrink with more runs on the same sentences)."""
    if c.paired:
        # The per-seed differences' variance: se_run^2 * n_a.
        terms = [(c.se_run ** 2 * c.n_a / n, n - 1)]
    else:
        terms = [((c.sd_a or 0.0) ** 2 / n, n - 1), ((c.sd_b or 0.0) ** 2 / n, n - 1)]
    v_test = (c.se_test or 0.0) ** 2
    total = sum(v for v, _ in terms) + v_test
    return math.sqrt(total), _satterthwaite(terms, v_test, c.sentences) if total else math.inf


def runs_needed(c: Comparison, alpha: float = ALPHA, power: float = POWER,
                margin: float | None = None) -> tuple[int | None, str]:
    """(runs a side, why) for a difference of the observed size to be found at ``power``
    by a two-sided test at ``alpha``: the least n with |Δ| / se(n) >= t_{1-alpha/2} +
    t_{power} (the normal approximation to the noncentral t, with Satterthwaite's df at n).
    With ``margin``, the runs a two one-sided tests' (TOST) equivalence within ±margin
    would need instead, were the true difference the observed one: (margin - |Δ|) / se(n)
    >= t_{1-alpha} + t_{power}. None with the reason when no number of runs would do
    (the test set's share alone too large, or |Δ| >= margin)."""
    if c.se_run is None or c.se_test is None:
        return None, ""
    t = _t()
    gap = abs(c.delta) if margin is None else margin - abs(c.delta)
    if gap <= 0:
        return None, ("no difference to resolve" if margin is None else
                      f"|Δ| {abs(c.delta):.2f} >= the margin {margin:g}: no runs would show "
                      "equivalence")
    tail = alpha / 2 if margin is None else alpha
    for n in range(2, MAX_RUNS + 1):
        se, df = _se_at(c, n)
        if se == 0 or gap / se >= t.ppf(1 - tail, df) + t.ppf(power, df):
            return n, ""
    if c.se_test and gap / c.se_test < 2.8:
        return None, "not with more runs on these sentences: the test set's share alone " \
                     f"(se {c.se_test:.2f}) is too large; a larger test set"
    return None, f"more than {MAX_RUNS} runs a side"
