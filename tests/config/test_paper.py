"""The paper's figures as the project holds them: Tables 2 and 3 of Vaswani et al. (2017).

The values are asserted here directly, and also against the paper's tables in PAPER.md when
that file is found (TRANSFORMER_JAX_PAPER_MD, or shared/PAPER.md beside or above the
repository).
"""

import os
import re
from pathlib import Path

import pytest

from transformer_jax import paper

from .. import needs

ROOT = Path(__file__).resolve().parents[2]

# variant -> (newstest2013 PPL, BLEU, params in millions or None), Table 3 of the paper.
TABLE3 = {
    "base": (4.92, 25.8, 65), "A_h1": (5.29, 24.9, None), "A_h4": (5.00, 25.5, None),
    "A_h16": (4.91, 25.8, None), "A_h32": (5.01, 25.4, None), "B_dk16": (5.16, 25.1, 58),
    "B_dk32": (5.01, 25.4, 60), "C_N2": (6.11, 23.7, 36), "C_N4": (5.19, 25.3, 50),
    "C_N8": (4.88, 25.5, 80), "C_d256": (5.75, 24.5, 28), "C_d1024": (4.66, 26.0, 168),
    "C_ff1024": (5.12, 25.4, 53), "C_ff4096": (4.75, 26.2, 90), "D_drop0": (5.77, 24.6, None),
    "D_drop02": (4.95, 25.5, None), "D_ls0": (4.67, 25.3, None), "D_ls02": (5.47, 25.7, None),
    "E_learned": (4.92, 25.7, None), "big": (4.33, 26.4, 213),
}


def paper_md() -> Path | None:
    candidates = [os.environ.get("TRANSFORMER_JAX_PAPER_MD", "")]
    candidates += [str(d / "shared" / "PAPER.md") for d in (ROOT, *ROOT.parents[:2])]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def _variant(row: str, cells: dict[str, str]) -> str:
    """The config variant of one row of the paper's Table 3, from the cells it fills."""
    if row in ("base", "big"):
        return row
    if row == "A":
        return f"A_h{cells['h']}"
    if row == "B":
        return f"B_dk{cells['d_k']}"
    if row == "C":
        for column, prefix in (("N", "C_N"), ("d_model", "C_d"), ("d_ff", "C_ff")):
            if cells[column]:
                return prefix + cells[column]
    if row == "D":
        names = {"0.0": "0", "0.2": "02"}
        if cells["P_drop"]:
            return "D_drop" + names[cells["P_drop"]]
        return "D_ls" + names[cells["eps_ls"]]
    if row == "E":
        return "E_learned"
    raise ValueError(f"unexpected Table 3 row {row!r}")


def parse_table3(text: str) -> dict[str, tuple[float, float, float | None]]:
    """{variant: (PPL, BLEU, params M)} from the Markdown Table 3 of PAPER.md."""
    section = text.split("## Table 3", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for line in lines[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        params = re.match(r"(\d+)M", cells["params"])
        out[_variant(cells["row"], cells)] = (float(cells["PPL"]), float(cells["BLEU"]),
                                              int(params.group(1)) if params else None)
    return out


def test_table3_holds_the_papers_figures():
    assert paper.TABLE3 == TABLE3
    # Row A: one head is 0.9 BLEU below the best setting of h.
    row_a = [paper.TABLE3[v][1] for v in ("A_h1", "A_h4", "base", "A_h16", "A_h32")]
    assert max(row_a) - row_a[0] == pytest.approx(0.9)


def test_table2_holds_the_papers_figures():
    assert paper.TABLE2["base"] == {"en_de_bleu": 27.3, "en_fr_bleu": 38.1, "train_flops": 3.3e18}
    assert paper.TABLE2["big"] == {"en_de_bleu": 28.4, "en_fr_bleu": 41.8, "train_flops": 2.3e19}


def test_table3_matches_paper_md():
    path = paper_md()
    if path is None:
        needs.allowed_skip(needs.PAPER_MD)
    assert parse_table3(path.read_text()) == paper.TABLE3


def test_table2_matches_paper_md():
    path = paper_md()
    if path is None:
        needs.allowed_skip(needs.PAPER_MD)
    section = path.read_text().split("## Table 2", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| Transformer")}
    for name, key in (("Transformer (base)", "base"), ("Transformer (big)", "big")):
        _, de, fr, flops = rows[name]
        assert paper.TABLE2[key] == {"en_de_bleu": float(de), "en_fr_bleu": float(fr),
                                     "train_flops": float(flops)}
