"""The expected best of n trials (Dodge et al. 2019): worked out by hand for three trials, and
against a simulation of the draws."""

import math

import numpy as np
import pytest

from transformer_jax.errors import UserError
from transformer_jax.evaluation.expected_max import curve, expected_best


def test_three_trials_by_hand():
    # Results 1, 2, 4. Best of n draws with replacement is 4 unless every draw misses it:
    # n = 1: (1 + 2 + 4) / 3 = 7/3.
    # n = 2: P(4) = 1 - (2/3)^2 = 5/9, P(2) = (2/3)^2 - (1/3)^2 = 3/9, P(1) = 1/9:
    #        (1 + 6 + 20) / 9 = 3; E[max^2] = (1 + 12 + 80) / 9 = 93/9, variance 12/9.
    # n = 3: P(4) = 19/27, P(2) = 7/27, P(1) = 1/27: (1 + 14 + 76) / 27 = 91/27.
    values = [2.0, 4.0, 1.0]
    assert expected_best(values, 1) == pytest.approx((7 / 3, math.sqrt(14 / 9)))
    assert expected_best(values, 2) == pytest.approx((3.0, math.sqrt(12 / 9)))
    assert expected_best(values, 3)[0] == pytest.approx(91 / 27)
    # Lower is better (perplexity): the minimum of two draws is 1 with P 5/9, 2 with 3/9,
    # 4 with 1/9: (5 + 6 + 4) / 9 = 5/3.
    assert expected_best(values, 2, lower_is_better=True)[0] == pytest.approx(5 / 3)
    assert [m for _, m, _ in curve(values, [1, 2, 3])] == pytest.approx([7 / 3, 3, 91 / 27])


def test_selected_on_one_figure_reported_on_another():
    # Chosen on perplexity (1.2 best, then 1.3, then 2.0), reported by BLEU (88, 80, 10): of
    # two draws the chosen one is 1.2's with P 5/9, 1.3's 3/9, 2.0's 1/9:
    # (5 x 88 + 3 x 80 + 10) / 9 = 690 / 9.
    ppl, bleu = [1.3, 1.2, 2.0], [80.0, 88.0, 10.0]
    assert expected_best(ppl, 2, bleu, lower_is_better=True)[0] == pytest.approx(690 / 9)
    # Ties on the selection are broken at random: selections 1, 1, 2 reporting 10, 20, 30.
    # Of the 9 ordered pairs, the 5 with the third trial report 30; (0, 0) 10, (1, 1) 20,
    # (0, 1) and (1, 0) 15 each: (150 + 60) / 9.
    assert expected_best([1.0, 1.0, 2.0], 2, [10.0, 20.0, 30.0])[0] == pytest.approx(210 / 9)


def test_agrees_with_simulated_draws():
    rng = np.random.default_rng(20191103)
    ppl = rng.lognormal(0.2, 0.3, size=12)
    bleu = 100 - 20 * ppl + rng.normal(0, 3, size=12)
    draws = 200_000
    for n in (1, 3, 7, 20):
        picks = rng.integers(0, 12, size=(draws, n))
        best = picks[np.arange(draws), np.argmin(ppl[picks], axis=1)]
        for report, simulated in ((None, ppl[best]), (bleu, bleu[best])):
            mean, std = expected_best(ppl, n, report, lower_is_better=True)
            # Within 5 standard errors of the simulation's mean; the spread within 2%.
            assert abs(mean - simulated.mean()) < 5 * simulated.std() / math.sqrt(draws) + 1e-12
            assert std == pytest.approx(simulated.std(), rel=0.02, abs=1e-9)


def test_bad_input_is_one_line():
    with pytest.raises(UserError, match=r"^expected best: n must be an integer >= 1, got 0$"):
        expected_best([1.0, 2.0], 0)
    with pytest.raises(UserError, match=r"^expected best: selection must be a non-empty list"):
        expected_best([], 1)
    with pytest.raises(UserError, match=r"^expected best: selection\[1\] is nan, not a finite"):
        expected_best([1.0, float("nan")], 1)
    with pytest.raises(UserError, match=r"^expected best: report has 1 values, selection 2$"):
        expected_best([1.0, 2.0], 1, [3.0])
