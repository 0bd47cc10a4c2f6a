"""Each search's confirmed best setting against the grid's best, trained again with the same
code, and the CPU-minutes of each phase.

    python -m experiments.results.lr_warmup_protocol_demo.against_grid \
        runs/lr_warmup_gridbest runs/lr_warmup_protocol_s0 runs/lr_warmup_protocol_s1 ...

For each search root: its confirmed best setting (the study's ranking: mean over all seeds),
that setting's validation perplexity and test BLEU (mean ± std over its seeds), the paired
test BLEU against the grid best's by the report's run-level statistics (seed s against seed s),
whether its perplexity lies within the grid best's mean ± 2 std, and the training steps and
CPU-minutes (each run's own user + system time) spent exploring (the first seed's runs) and
confirming (the others'), as a share of the grid's own (lr_warmup_demo's results.csv): steps
are the budget that does not change with the machine's load. The grid's CPU-minutes were
measured on another day; its 18 runs at the pace of the grid best's runs trained again here
are the CPU budget of the same day. Then one JSON line.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from transformer_jax.sweeps.report import build, settings
from transformer_jax.sweeps.search import progress, study as study_lib

GRID_RUNS = Path(__file__).parents[1] / "lr_warmup_demo" / "results.csv"


def grid_cost() -> dict:
    """The 18-run grid's training steps and CPU-minutes, from its report's rows."""
    with GRID_RUNS.open() as f:
        rows = list(csv.DictReader(f))
    return {"runs": len(rows), "steps": sum(int(r["steps"]) for r in rows),
            "cpu_min": sum(float(r["cpu_s"]) for r in rows) / 60}


def spent(rows: list[dict]) -> dict:
    """Training steps and CPU-minutes spent exploring (the first seed's runs) and confirming."""
    out = {"explore": {"steps": 0, "cpu_min": 0.0}, "confirm": {"steps": 0, "cpu_min": 0.0}}
    for r in rows:
        phase = out["explore" if r["seed"] in (0, None) else "confirm"]
        phase["steps"] += r["steps"] or 0
        phase["cpu_min"] += (r["cpu_s"] or 0.0) / 60
    return out


def cost_line(cost: dict, grid: dict) -> str:
    steps = cost["explore"]["steps"] + cost["confirm"]["steps"]
    cpu = cost["explore"]["cpu_min"] + cost["confirm"]["cpu_min"]
    here = grid.get("cpu_min_here")
    return (f"steps explore {cost['explore']['steps']:,} + confirm {cost['confirm']['steps']:,}"
            f" = {steps:,} ({steps / grid['steps']:.0%} of the grid's {grid['steps']:,}); "
            f"CPU-min {cost['explore']['cpu_min']:.1f} + {cost['confirm']['cpu_min']:.1f} = "
            f"{cpu:.1f} ({cpu / grid['cpu_min']:.0%} of the grid's {grid['cpu_min']:.0f}"
            + (f"; {cpu / here:.0%} of its {here:.0f} at this run's pace)" if here else ")"))


def full_runs(rows: list[dict]) -> list[dict]:
    """The rows of runs trained to their end, with their CPU time."""
    return [r for r in rows if r["cpu_s"] and r["steps"] == r["num_steps"]]


def pace(rows: list[dict], runs: int) -> float | None:
    """CPU-minutes of ``runs`` full runs at the mean of the full runs among ``rows``."""
    full = [r["cpu_s"] for r in full_runs(rows)]
    return runs * sum(full) / len(full) / 60 if full else None


def grid_best(rows: list[dict]) -> dict:
    """The setting of the lowest mean validation perplexity among the fully seeded ones of a
    root's ``rows``."""
    sets = [s for s in settings.settings(rows) if s["dev_ppl"]]
    most = max(s["n"] for s in sets)
    return min((s for s in sets if s["n"] == most), key=lambda s: s["dev_ppl"][0])


def confirmed_best(root: str) -> tuple[dict | None, dict, list[dict]]:
    """(the search's confirmed best setting in the report's terms, or None where no trial
    completed; sweep.json's search record; every run's row)."""
    definition, rows = build.collect(root)
    record = definition["search"]
    study = study_lib.load_study(record["study"], study_lib.storage_url(root,
                                                                        record["storage"]))
    ranked = progress.ranking(study.get_trials(deepcopy=False), record["direction"],
                                   record["seeds"], per_seed=True)
    if not ranked:
        return None, record, rows
    best = ranked[0]
    prefix = f"trial={best.named},"
    (entry,) = [s for s in settings.settings(rows) if s["setting"].startswith(prefix)]
    return entry, record, rows


def main(grid_root: str, *search_roots: str) -> dict:
    grid_rows = build.collect(grid_root)[1]
    grid = grid_best(grid_rows)
    ppl, std = grid["dev_ppl"][:2]
    print(f"grid best {grid['setting']}: validation PPL {ppl:.3f} ± {std:.3f}, test BLEU "
          f"{grid['test_bleu'][0]:.1f} ± {grid['test_bleu'][1]:.1f} (n={grid['n']})")
    out = {"grid": {"setting": grid["setting"], "ppl": grid["dev_ppl"][:2],
                    "test_bleu": grid["test_bleu"][:2]}, "searches": {}}
    cost = grid_cost()
    cost["cpu_min_here"] = pace(grid_rows, cost["runs"])
    out["grid"]["cost"] = {"runs": cost["runs"], "steps": cost["steps"],
                           "cpu_min": round(cost["cpu_min"], 1),
                           "cpu_min_here": cost["cpu_min_here"] and round(
                               cost["cpu_min_here"], 1)}
    if cost["cpu_min_here"]:
        print(f"the grid: {cost['runs']} runs, {cost['steps']:,} steps, "
              f"{cost['cpu_min']:.0f} CPU-min when it ran; {cost['cpu_min_here']:.0f} at the "
              "pace of the grid best's runs here")
    for root in search_roots:
        entry, record, rows = confirmed_best(root)
        phases = spent(rows)
        used = {"steps": {k: v["steps"] for k, v in phases.items()},
                "cpu_min": {k: round(v["cpu_min"], 1) for k, v in phases.items()}}
        if entry is None:
            print(f"{root}: no trial completed, nothing confirmed (not met); "
                  f"{cost_line(phases, cost)}")
            out["searches"][root] = {"setting": None, "met": False, **used}
            continue
        test = settings.bleu_test(entry, grid)
        within = abs(entry["dev_ppl"][0] - ppl) <= 2 * std
        met = not test.get("significant") or test["delta"] >= 0
        print(f"{root}: best {entry['setting']} (n={entry['n']}): validation PPL "
              f"{entry['dev_ppl'][0]:.3f} ± {entry['dev_ppl'][1] or 0:.3f} "
              f"({'within' if within else 'outside'} the grid best's ± 2 std), test BLEU "
              f"{entry['test_bleu'][0]:.1f} ± {entry['test_bleu'][1] or 0:.1f}; against the "
              f"grid's best: {settings.bleu_test_text(test)} "
              f"({'met' if met and within else 'not met'}); {cost_line(phases, cost)}; "
              f"sampler: {record.get('sampler_chosen')}")
        out["searches"][root] = {"setting": entry["setting"], "ppl": entry["dev_ppl"][:2],
                                 "test_bleu": entry["test_bleu"][:2], "test": test,
                                 "ppl_within_2std": within, "met": bool(met and within),
                                 **used}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(*sys.argv[1:])
