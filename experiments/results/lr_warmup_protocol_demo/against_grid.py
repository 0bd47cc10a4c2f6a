"""Each search's confirmed best setting against the grid's best, trained again with the same
code, and the CPU-minutes of each phase.

    python -m experiments.results.lr_warmup_protocol_demo.against_grid \
        runs/lr_warmup_gridbest runs/lr_warmup_protocol_s0 runs/lr_warmup_protocol_s1 ...

For each search root: its confirmed best setting (the study's ranking: mean over all seeds),
that setting's validation perplexity and test BLEU (mean ± std over its seeds), the paired
bootstrap of its pooled test translations against the grid best's (seed s against seed s),
whether its perplexity lies within the grid best's mean ± 2 std, and the CPU-minutes (each
run's own user + system time) spent exploring (the first seed's runs) and confirming (the
others'). Then one JSON line.
"""

from __future__ import annotations

import json
import sys

from transformer_jax.sweeps import report, search_status, study as study_lib


def grid_best(root: str) -> dict:
    """The root's setting of the lowest mean validation perplexity among fully seeded ones."""
    sets = [s for s in report.settings(report.collect(root)[1]) if s["dev_ppl"]]
    most = max(s["n"] for s in sets)
    return min((s for s in sets if s["n"] == most), key=lambda s: s["dev_ppl"][0])


def confirmed_best(root: str) -> tuple[dict | None, dict, list[dict]]:
    """(the search's confirmed best setting in the report's terms, or None where no trial
    completed; sweep.json's search record; every run's row)."""
    definition, rows = report.collect(root)
    record = definition["search"]
    study = study_lib.load_study(record["study"], study_lib.storage_url(root,
                                                                        record["storage"]))
    ranked = search_status.ranking(study.get_trials(deepcopy=False), record["direction"],
                                   record["seeds"], per_seed=True)
    if not ranked:
        return None, record, rows
    best = ranked[0]
    prefix = f"trial={best.named},"
    (entry,) = [s for s in report.settings(rows) if s["setting"].startswith(prefix)]
    return entry, record, rows


def main(grid_root: str, *search_roots: str) -> dict:
    grid = grid_best(grid_root)
    ppl, std = grid["dev_ppl"][:2]
    print(f"grid best {grid['setting']}: validation PPL {ppl:.3f} ± {std:.3f}, test BLEU "
          f"{grid['test_bleu'][0]:.1f} ± {grid['test_bleu'][1]:.1f} (n={grid['n']})")
    out = {"grid": {"setting": grid["setting"], "ppl": grid["dev_ppl"][:2],
                    "test_bleu": grid["test_bleu"][:2]}, "searches": {}}
    for root in search_roots:
        entry, record, rows = confirmed_best(root)
        cpu = {"explore": 0.0, "confirm": 0.0}
        for r in rows:
            cpu["explore" if r["seed"] in (0, None) else "confirm"] += (r["cpu_s"] or 0.0) / 60
        if entry is None:
            print(f"{root}: no trial completed, nothing confirmed (not met); CPU-min explore "
                  f"{cpu['explore']:.1f}")
            out["searches"][root] = {"setting": None, "met": False,
                                     "cpu_min": {k: round(v, 1) for k, v in cpu.items()}}
            continue
        test = report.significance([grid, entry], grid)[entry["setting"]]
        within = abs(entry["dev_ppl"][0] - ppl) <= 2 * std
        met = test["p"] > 0.05 or test["delta"] >= 0
        print(f"{root}: best {entry['setting']} (n={entry['n']}): validation PPL "
              f"{entry['dev_ppl'][0]:.3f} ± {entry['dev_ppl'][1] or 0:.3f} "
              f"({'within' if within else 'outside'} the grid best's ± 2 std), test BLEU "
              f"{entry['test_bleu'][0]:.1f} ± {entry['test_bleu'][1] or 0:.1f}; against the "
              f"grid's best: Δ {test['delta']:+.2f}, p = {test['p']:.3f}, higher on "
              f"{test['seed_wins']}/{test['seeds']} seeds ({'met' if met and within else 'not met'}"
              f"); CPU-min explore {cpu['explore']:.1f} + confirm {cpu['confirm']:.1f} = "
              f"{sum(cpu.values()):.1f}; sampler: {record.get('sampler_chosen')}")
        out["searches"][root] = {"setting": entry["setting"], "ppl": entry["dev_ppl"][:2],
                                 "test_bleu": entry["test_bleu"][:2], "test": test,
                                 "ppl_within_2std": within, "met": bool(met and within),
                                 "cpu_min": {k: round(v, 1) for k, v in cpu.items()}}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(*sys.argv[1:])
