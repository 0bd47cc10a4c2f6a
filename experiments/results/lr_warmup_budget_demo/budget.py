"""The lr x warmup question judged by the expected best against the steps spent (Dodge et al.
2019, "Show Your Work"), for the grid, random search and the small-budget protocol, from the
records their results folders hold and nothing else.

    python -m experiments.results.lr_warmup_budget_demo.budget [--out=DIR]

Writes budget.csv, budget.md and budget.png (default: this folder). The procedures:

- **grid, as run**: lr_warmup_demo's 6 settings on k of its 3 seeds (k = 1, 2, 3), the
  setting of the lowest mean validation perplexity chosen and its mean figures reported;
  the mean and spread over the seed subsets of size k.
- **grid points drawn at random**: a trial is one of lr_warmup_demo's 18 runs (a setting and
  a seed), drawn with replacement; the expected best of n (evaluation/expected_max.py).
- **random search**: lr_warmup_search_demo's exploring runs (seed 0): its 8 trials were all
  drawn at random (fewer than TPE's start-up trials). Trial 7 never reported and is left out.
  Four were pruned before the end, with no test BLEU: bounded two ways. *Finished trials*
  keeps the 3 that ran to the end (favouring the search: its pruned draws were its worst);
  *pruned at the rung* keeps all 7, a pruned trial at its perplexity where it stopped and
  0 BLEU (against it).
- **protocol**: lr_warmup_protocol_demo's three repeats of 2026-12-04 (8 trials on one seed,
  the best confirmed on two more); a repeat's figures are its confirmed setting's means over
  3 seeds, the only figures of that round the folder keeps; the expected best of n repeats.

Steps are the budget (a trial's or a repeat's own training steps); CPU-minutes are as each
folder measured them, on different days and loads, so only comparable within a procedure.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
from pathlib import Path

from matplotlib.figure import Figure

from transformer_jax.evaluation.expected_max import expected_best
from transformer_jax.io import storage

HERE = Path(__file__).parent
GRID = HERE.parent / "lr_warmup_demo" / "results.csv"
SEARCH = HERE.parent / "lr_warmup_search_demo" / "results.csv"
PROTOCOL = HERE.parent / "lr_warmup_protocol_demo" / "against_grid_budget.txt"
FIELDS = ["procedure", "n", "steps", "cpu_min", "ppl", "ppl_sd", "bleu", "bleu_sd"]
GRID_DRAWS = (1, 2, 3, 4, 6, 9, 12, 18)


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _point(procedure: str, n: int, steps: float, cpu_s: float, ppl: tuple, bleu: tuple) -> dict:
    return {"procedure": procedure, "n": n, "steps": round(steps), "cpu_min": round(cpu_s / 60, 1),
            "ppl": round(ppl[0], 3), "ppl_sd": round(ppl[1], 3),
            "bleu": round(bleu[0], 1), "bleu_sd": round(bleu[1], 1)}


def _dodge(procedure: str, ppl: list, bleu: list, steps: list, cpu_s: list, ns) -> list[dict]:
    """The expected best of n trials, selected on perplexity; n trials cost n mean trials."""
    return [_point(procedure, n, n * statistics.mean(steps), n * statistics.mean(cpu_s),
                   expected_best(ppl, n, lower_is_better=True),
                   expected_best(ppl, n, bleu, lower_is_better=True)) for n in ns]


def grid_as_run(rows: list[dict]) -> list[dict]:
    out = []
    for k in (1, 2, 3):
        picks = []
        for seeds in itertools.combinations(sorted({r["seed"] for r in rows}), k):
            runs = [r for r in rows if r["seed"] in seeds]
            by = {}
            for r in runs:
                by.setdefault(r["setting"], []).append(r)
            best = min(by.values(), key=lambda rs: statistics.mean(float(r["dev_ppl"]) for r in rs))
            picks.append((statistics.mean(float(r["dev_ppl"]) for r in best),
                          statistics.mean(float(r["test_bleu"]) for r in best),
                          sum(int(r["steps"]) for r in runs), sum(float(r["cpu_s"]) for r in runs)))
        spread = (lambda xs: (statistics.mean(xs), statistics.pstdev(xs)))
        p, b, s, c = zip(*picks, strict=True)
        out.append(_point("grid, as run", k, statistics.mean(s), statistics.mean(c),
                          spread(p), spread(b)))
    return out


def grid_drawn(rows: list[dict]) -> list[dict]:
    return _dodge("grid points drawn at random", [float(r["dev_ppl"]) for r in rows],
                  [float(r["test_bleu"]) for r in rows], [int(r["steps"]) for r in rows],
                  [float(r["cpu_s"]) for r in rows], GRID_DRAWS)


def random_search(rows: list[dict]) -> list[dict]:
    trials = [r for r in rows if r["seed"] == "0" and r["dev_ppl"]]
    finished = [r for r in trials if r["status"] == "finished"]
    out = []
    for name, chosen in (("random search, finished trials", finished),
                         ("random search, pruned at the rung", trials)):
        out += _dodge(name, [float(r["dev_ppl"]) for r in chosen],
                      [float(r["test_bleu"] or 0.0) for r in chosen],
                      [int(r["steps"]) for r in chosen], [float(r["cpu_s"]) for r in chosen],
                      range(1, len(chosen) + 1))
    return out


def protocol(path: Path) -> list[dict]:
    searches = json.loads(path.read_text().splitlines()[-1])["searches"].values()
    return _dodge("protocol", [s["ppl"][0] for s in searches],
                  [s["test_bleu"][0] for s in searches],
                  [sum(s["steps"].values()) for s in searches],
                  [60 * sum(s["cpu_min"].values()) for s in searches], (1, 2, 3))


def table() -> list[dict]:
    grid = _rows(GRID)
    return (grid_as_run(grid) + grid_drawn(grid) + random_search(_rows(SEARCH))
            + protocol(PROTOCOL))


def markdown(points: list[dict]) -> str:
    lines = ["| procedure | n | steps | CPU-min | E[best validation PPL] | E[its test BLEU] |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {p['procedure']} | {p['n']} | {p['steps']:,} | {p['cpu_min']:.1f} | "
              f"{p['ppl']:.3f} ± {p['ppl_sd']:.3f} | {p['bleu']:.1f} ± {p['bleu_sd']:.1f} |"
              for p in points]
    return "\n".join(lines) + "\n"


def plot(points: list[dict]) -> Figure:
    fig = Figure(figsize=(11, 4.4))
    axes = fig.subplots(1, 2)
    for name in dict.fromkeys(p["procedure"] for p in points):
        ps = [p for p in points if p["procedure"] == name]
        x = [p["steps"] for p in ps]
        for ax, key in zip(axes, ("ppl", "bleu"), strict=True):
            y = [p[key] for p in ps]
            sd = [p[key + "_sd"] for p in ps]
            line, = ax.plot(x, y, marker="o", ms=4, label=name)
            if key == "ppl":  # its sd, ruled by diverged draws, is in budget.md
                continue
            ax.fill_between(x, [a - b for a, b in zip(y, sd, strict=True)],
                            [a + b for a, b in zip(y, sd, strict=True)],
                            color=line.get_color(), alpha=0.12)
    # Perplexity's mean is ruled by diverged draws (near 300): the axis shows where the
    # procedures part, points above it are in budget.md.
    axes[0].set(ylim=(1.15, 1.5), ylabel="expected best validation perplexity (to 1.5)")
    axes[1].set(ylim=(0, 95), ylabel="expected test BLEU of that trial")
    for ax in axes:
        ax.set(xscale="log", xlabel="training steps spent")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle("lr x warmup at the demo scale: what a budget buys (BLEU: mean ± sd)")
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    out = parser.parse_args(argv).out
    if not out.is_dir():
        parser.error(f"--out={out}: not a directory")
    points = table()
    storage.write_csv(out / "budget.csv", FIELDS, points)
    storage.write_atomically(out / "budget.md", markdown(points).encode())
    storage.write_figure(plot(points), out / "budget.png")
    print(markdown(points), end="")
    return points


if __name__ == "__main__":
    main()
