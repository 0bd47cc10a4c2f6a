"""The search's best setting against the grid's best, trained again with the same code.

    python -m experiments.results.lr_warmup_search_demo.against_grid \
        runs/lr_warmup_search runs/lr_warmup_gridbest

Prints each one's validation perplexity and test BLEU (mean ± std over its seeds) and the
comparison report's run-level statistics of their test BLEU (seed s against seed s), then
one JSON line.
"""

from __future__ import annotations

import json
import sys

from transformer_jax.sweeps.report import build, settings


def best_setting(root: str) -> dict:
    """The root's setting of the lowest mean validation perplexity among fully seeded ones."""
    sets = [s for s in settings.settings(build.collect(root)[1]) if s["dev_ppl"]]
    most = max(s["n"] for s in sets)
    return min((s for s in sets if s["n"] == most), key=lambda s: s["dev_ppl"][0])


def main(search_root: str, grid_root: str) -> dict:
    search, grid = best_setting(search_root), best_setting(grid_root)
    test = settings.bleu_test(search, grid)
    out = {}
    for name, entry in (("search", search), ("grid", grid)):
        ppl, bleu = entry["dev_ppl"], entry["test_bleu"]
        print(f"{name} best {entry['setting']}: validation PPL {ppl[0]:.3f} ± {ppl[1]:.3f}, "
              f"test BLEU {bleu[0]:.1f} ± {bleu[1]:.1f} (n={entry['n']})")
        out[name] = {"setting": entry["setting"], "ppl": ppl[:2], "test_bleu": bleu[:2]}
    print(f"search against grid: test BLEU {settings.bleu_test_text(test)}")
    out["test"] = test
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(*sys.argv[1:3])
