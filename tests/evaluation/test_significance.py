"""The run-level statistics behind every verdict (transformer_jax/evaluation/significance.py),
calibrated on simulated experiments whose variance components are known.

Each simulated experiment is two settings' runs scored sentence by sentence, drawn here from
an additive model independent of the module: sentence s of run r of setting g scores

    mu_g + c_s + u_gs + rho_gr + e_grs

with c_s the sentence's difficulty (common to every run), u_gs the setting's own luck on the
sentence (a fresh test set each experiment), rho_gr the run's offset (initialisation, data
order; in a paired design seed r's share of it is common to both settings) and e_grs the
run's noise on the sentence. The figure is the mean score, so the variance of Δ is known in
closed form: 2 su^2 / S + (sr^2 + se^2 / S) (1 / na + 1 / nb) for independent runs. A test at
alpha = 0.05 must reject a true null in 2.5-7.5% of 2,000 experiments, and find an effect.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from transformer_jax.evaluation import significance

S = 100  # sentences of a simulated test set
SU, SR, SE = 5.0, 1.0, 12.0  # sentence x setting, run, run x sentence standard deviations
SHARED = 0.8  # the share of a run's variance common to a seed in a paired design
EXPERIMENTS = 2000


def mean_score(stats_: np.ndarray) -> np.ndarray:
    return stats_[..., 0] / stats_[..., 1]


def simulate(rng: np.random.Generator, runs: int, delta: float, paired: bool
             ) -> tuple[np.ndarray, np.ndarray]:
    """Two settings' [runs, S, 2] statistics (score, 1) of one experiment."""
    c = rng.normal(0, 20, S)
    shared = rng.normal(0, SR * math.sqrt(SHARED), runs) if paired else None
    sides = []
    for mu in (delta, 0.0):
        u = rng.normal(0, SU, S)
        if paired:
            rho = shared + rng.normal(0, SR * math.sqrt(1 - SHARED), runs)
        else:
            rho = rng.normal(0, SR, runs)
        x = mu + c + u + rho[:, None] + rng.normal(0, SE, (runs, S))
        sides.append(np.stack([x, np.ones_like(x)], axis=-1))
    return sides[0], sides[1]


def true_se(runs: int, paired: bool) -> float:
    run_var = SR ** 2 * (1 - SHARED) if paired else SR ** 2
    return math.sqrt(2 * SU ** 2 / S + 2 * (run_var + SE ** 2 / S) / runs)


def rejections(runs: int, delta: float, paired: bool, seed: int) -> tuple[float, float]:
    """(share of experiments rejecting at 0.05, share whose 95% interval holds delta)."""
    rng = np.random.default_rng(seed)
    seeds = list(range(runs))
    other = seeds if paired else [f"other{i}" for i in range(runs)]
    rejected = covered = 0
    for i in range(EXPERIMENTS):
        a, b = simulate(rng, runs, delta, paired)
        c = significance.compare(a, b, mean_score, seeds, other, samples=200, seed=i)
        assert c.paired == paired
        rejected += c.p < 0.05
        covered += c.low <= delta <= c.high
    return rejected / EXPERIMENTS, covered / EXPERIMENTS


@pytest.mark.slow
@pytest.mark.parametrize("runs", [3, 6])
@pytest.mark.parametrize("paired", [False, True])
def test_false_positive_rate_and_power(runs: int, paired: bool) -> None:
    fpr, coverage = rejections(runs, 0.0, paired, seed=runs + 10 * paired)
    # The effect an oracle z-test (the variance known) finds 80% of the time at 6 runs.
    effect = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * true_se(6, paired)
    power, _ = rejections(runs, effect, paired, seed=100 + runs + 10 * paired)
    print(f"runs {runs} a side, {'paired' if paired else 'unpaired'}: false positives "
          f"{fpr:.3f}, 95% interval covers 0 in {coverage:.3f}; power {power:.3f} at "
          f"Δ = {effect:.2f} (true se {true_se(runs, paired):.3f})")
    assert 0.025 <= fpr <= 0.075
    assert 0.925 <= coverage <= 0.975
    # At 6 runs the estimated variance costs some power against the oracle's 0.8.
    assert power >= (0.65 if runs == 6 else 0.3)


def test_one_experiment_by_hand() -> None:
    """Two runs a side, unpaired, every run's sentences alike up to an offset: the test
    set's share is nil (every resample moves each run alike and the sides alike), so
    the comparison is Welch's t-test on the runs' figures, worked out by scipy."""
    base = np.array([3.0, 5.0, 4.0, 8.0])
    a = np.stack([np.stack([base + off, np.ones(4)], -1) for off in (1.0, 2.0)])
    b = np.stack([np.stack([base + off, np.ones(4)], -1) for off in (0.0, 0.5)])
    c = significance.compare(a, b, mean_score, [0, 1], [2, 3])
    assert not c.paired
    assert c.delta == pytest.approx(1.25)
    assert c.se_test == pytest.approx(0.0, abs=1e-9)
    welch = stats.ttest_ind([6.0, 7.0], [5.0, 5.5], equal_var=False)
    assert c.p == pytest.approx(welch.pvalue)
    assert c.sd_a == pytest.approx(math.sqrt(0.5)) and c.sd_b == pytest.approx(math.sqrt(0.125))


def test_paired_runs_are_matched_by_seed() -> None:
    """Seeds in another order on one side are matched seed against seed: the per-seed
    differences are 1, 2 and 3 (a paired t-test: t = 2 / (1 / sqrt 3), 2 df)."""
    base = np.array([3.0, 5.0, 4.0, 8.0])
    runs = {0: 0.0, 1: 10.0, 2: 20.0}

    def side(extra: dict[int, float], order: list[int]) -> np.ndarray:
        return np.stack([np.stack([base + runs[s] + extra[s], np.ones(4)], -1) for s in order])

    a = side({0: 1.0, 1: 2.0, 2: 3.0}, [0, 1, 2])
    b = side({0: 0.0, 1: 0.0, 2: 0.0}, [2, 0, 1])
    c = significance.compare(a, b, mean_score, [0, 1, 2], [2, 0, 1])
    assert c.paired and c.delta == pytest.approx(2.0)
    assert c.p == pytest.approx(stats.ttest_rel([1, 2, 3], [0, 0, 0]).pvalue)


def test_one_run_a_side_gives_no_verdict() -> None:
    a = np.ones((1, 5, 2))
    c = significance.compare(a, np.ones((2, 5, 2)), mean_score)
    assert c.p is None and "one run" in c.note


def test_holm_and_bonferroni_intervals() -> None:
    """Holm's adjustment of p = 0.01, 0.04, 0.03 (by hand: 0.03, 0.06, 0.06) and the
    intervals drawn at 1 - 0.05 / 3."""
    made = [significance.Comparison(delta=1.0, mean_a=1.0, mean_b=0.0, n_a=3, n_b=3,
                                    paired=True, sd_a=1.0, sd_b=1.0, se_run=0.5, se_test=0.0,
                                    se=0.5, df=2.0, p=p, sentences=10)
            for p in (0.01, 0.04, 0.03)]
    out = significance.adjust(made)
    assert [c.p_adjusted for c in out] == pytest.approx([0.03, 0.06, 0.06])
    assert [c.significant for c in out] == [True, False, False]
    half = stats.t.ppf(1 - 0.05 / 3 / 2, 2.0) * 0.5
    assert out[0].low == pytest.approx(1.0 - half) and out[0].level == pytest.approx(1 - 0.05 / 3)


def test_runs_needed_by_hand() -> None:
    """Unpaired, sd 2 a side and no test-set share: n runs a side give se = 2 sqrt(2 / n),
    and a difference of 3 needs the least n with 3 / se >= t(0.975, df) + t(0.8, df), df =
    2 (n - 1) (Welch's, equal spreads); the same search done here with scipy."""
    c = significance.Comparison(delta=3.0, mean_a=3.0, mean_b=0.0, n_a=3, n_b=3, paired=False,
                                sd_a=2.0, sd_b=2.0, se_run=2 * math.sqrt(2 / 3), se_test=0.0,
                                se=2 * math.sqrt(2 / 3), df=4.0, p=0.2, sentences=100)
    expected = next(n for n in range(2, 100) if 3 / (2 * math.sqrt(2 / n)) >=
                    stats.t.ppf(0.975, 2 * (n - 1)) + stats.t.ppf(0.8, 2 * (n - 1)))
    assert significance.runs_needed(c)[0] == expected
    # Equivalence within ±1 of a difference of 3 cannot be shown; of 0.2 it can.
    assert significance.runs_needed(c, margin=1.0)[0] is None
    near = significance.runs_needed(
        significance.Comparison(**{**c.__dict__, "delta": 0.2}), margin=1.0)[0]
    assert near == next(n for n in range(2, 1000) if 0.8 / (2 * math.sqrt(2 / n)) >=
                        stats.t.ppf(0.95, 2 * (n - 1)) + stats.t.ppf(0.8, 2 * (n - 1)))
