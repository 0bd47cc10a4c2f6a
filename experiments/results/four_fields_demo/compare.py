"""The small-budget protocol against plain random search on a four-field space, and what a
grid of the same space would have cost.

    python -m experiments.results.four_fields_demo.compare \
        --protocol runs/four_fields_protocol_s0 --random runs/four_fields_random_s0

For each search root: its confirmed best setting (the study's ranking, mean over all seeds),
that setting's validation perplexity and test BLEU (mean ± std over its seeds), and the
training steps and CPU-minutes (each run's own user + system time) spent exploring and
confirming. Then the protocol's repeat r against random search's repeat r (the report's run-level
statistics of their confirmed bests' test BLEU, seed s against seed s), and the cost of a
grid of 3 values a field, at the steps and mean CPU-minutes of a run trained to its end here.
Then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics

from experiments.results.lr_warmup_protocol_demo.against_grid import (
    confirmed_best,
    full_runs,
    spent,
)
from transformer_jax.sweeps.report import settings as report_settings

GRID_VALUES_A_FIELD = 3


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", nargs="+", required=True)
    parser.add_argument("--random", nargs="+", required=True)
    args = parser.parse_args(argv)

    out: dict = {"searches": {}, "pairs": []}
    best: dict[str, dict | None] = {}
    full: list[dict] = []
    fields = seeds = 0
    for kind, roots in (("protocol", args.protocol), ("random", args.random)):
        for root in roots:
            entry, record, rows = confirmed_best(root)
            fields, seeds = len(record["space"]), record["seeds"]
            full += full_runs(rows)
            phases = spent(rows)
            steps = {k: v["steps"] for k, v in phases.items()}
            cpu = {k: round(v["cpu_min"], 1) for k, v in phases.items()}
            cost = (f"steps {steps['explore']:,} + {steps['confirm']:,} = "
                    f"{sum(steps.values()):,}; CPU-min {cpu['explore']:.1f} + "
                    f"{cpu['confirm']:.1f} = {sum(cpu.values()):.1f}")
            best[root] = entry
            result = {"kind": kind, "sampler": record.get("sampler_chosen"),
                      "steps": steps, "cpu_min": cpu}
            if entry is None:
                print(f"{kind} {root}: nothing confirmed; {cost}")
            else:
                print(f"{kind} {root}: best {entry['setting']} (n={entry['n']}): validation PPL "
                      f"{entry['dev_ppl'][0]:.3f} ± {entry['dev_ppl'][1] or 0:.3f}, test BLEU "
                      f"{entry['test_bleu'][0]:.1f} ± {entry['test_bleu'][1] or 0:.1f}; {cost}")
                result.update(setting=entry["setting"], ppl=entry["dev_ppl"][:2],
                              test_bleu=entry["test_bleu"][:2])
            out["searches"][root] = result

    for protocol, random in zip(args.protocol, args.random, strict=False):
        a, b = best[protocol], best[random]
        if a is None or b is None:
            continue
        test = report_settings.bleu_test(a, b)
        print(f"{protocol} against {random}: test BLEU "
              f"{report_settings.bleu_test_text(test)}")
        out["pairs"].append({"protocol": protocol, "random": random, "test": test})

    if full:
        settings = GRID_VALUES_A_FIELD ** fields
        run_steps = full[0]["num_steps"]
        run_cpu = statistics.mean(r["cpu_s"] for r in full) / 60
        print(f"a grid of {GRID_VALUES_A_FIELD} values a field: {settings} settings x {seeds} "
              f"seeds = {settings * seeds} runs, {settings * seeds * run_steps:,} steps, "
              f"{settings * seeds * run_cpu:,.0f} CPU-min at {run_cpu:.1f} a full run "
              f"({len(full)} measured)")
        out["grid"] = {"settings": settings, "seeds": seeds,
                       "steps": settings * seeds * run_steps,
                       "cpu_min": round(settings * seeds * run_cpu)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
