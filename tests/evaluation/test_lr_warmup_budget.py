"""experiments/results/lr_warmup_budget_demo: its committed table is what the three results
folders' records give, and two of its figures worked out from those records by hand."""

import pytest

from experiments.results.lr_warmup_budget_demo import budget


def test_committed_table_is_recomputed_from_the_records(tmp_path):
    points = budget.main(["--out", str(tmp_path)])
    assert (tmp_path / "budget.md").read_text() == (budget.HERE / "budget.md").read_text()
    assert (tmp_path / "budget.csv").read_text() == (budget.HERE / "budget.csv").read_text()
    assert (tmp_path / "budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def at(procedure, n):
        return next(p for p in points if p["procedure"] == procedure and p["n"] == n)

    # The grid on all three seeds chooses lr_scale 0.5 / warmup 150 (lr_warmup_demo's
    # results.csv: validation PPL 1.2058, 1.1947, 1.1992; test BLEU 88.02, 86.79, 87.95).
    whole = at("grid, as run", 3)
    assert (whole["ppl"], whole["bleu"], whole["steps"]) == (1.200, 87.6, 8100)
    # One protocol repeat: the mean of the three confirmed bests (against_grid_budget.txt:
    # 1.375, 1.212, 1.290; BLEU 77.1, 87.4, 83.1; 3,600 + 3,750 + 3,450 steps).
    one = at("protocol", 1)
    assert (one["ppl"], one["bleu"], one["steps"]) == (1.292, 82.5, 3600)
    # Random search's finished trials on seed 0 (lr_warmup_search_demo's results.csv:
    # 1.3484, 1.3178, 1.3107): the best of two draws is the lowest with P 5/9, the middle
    # with 3/9, the highest with 1/9.
    two = at("random search, finished trials", 2)
    assert two["ppl"] == pytest.approx((5 * 1.3107 + 3 * 1.3178 + 1.3484) / 9, abs=6e-4)

