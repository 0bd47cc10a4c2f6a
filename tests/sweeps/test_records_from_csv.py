"""experiments/records_from_csv.py: a results folder whose workdirs are gone gets records/
from its results.csv, and compare recomputes its tables from them, judged between runs."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax.sweeps.report import archive, build

ROOT = Path(__file__).resolve().parents[2]

# Two settings over three seeds, six runs started ten minutes apart; A_h4's seed 2 ran
# 631.2 s, every other run 600 s, and each used 540 s of CPU but the last (600 s).
FIGURES = {"base": ([1.25, 1.26, 1.27], [80.0, 82.0, 84.0]),
           "A_h4": ([1.30, 1.33, 1.36], [81.0, 84.0, 87.0])}
HEADING = """# heads

Heads against base.

scale: demo; machine: a machine; run on 2026-12-06; sweep end to end 1 min 00 s.

## Settings

| setting | variant | model | n | dev PPL |
|---|---|---|---|---|
"""


def _runs() -> list[dict]:
    rows = []
    for i, (setting, (ppls, bleus)) in enumerate(
            (s, FIGURES[s]) for s in FIGURES for _ in range(3)):
        seed = i % 3
        last = i == 5
        rows.append({
            "point": f"{setting},seed={seed}", "setting": setting, "seed": seed,
            "variant": setting, "value": setting, "N": 3, "d_model": 128, "d_ff": 512,
            "h": 8 if setting == "base" else 4, "d_k": 16 if setting == "base" else 32,
            "d_v": 16 if setting == "base" else 32, "P_drop": 0.1, "eps_ls": 0.1,
            "positions": "sinusoidal", "status": "finished", "params": 1516392,
            "steps": 450, "num_steps": 450, "wall_s": 631.2 if last else 600.0,
            "cpu_s": 600.0 if last else 540.0, "tokens_per_s": 1700.5,
            "dev_loss": math.log(ppls[seed]), "dev_ppl": ppls[seed], "test_bleu": bleus[seed],
            "bleu_sentences": 300, "paper_ppl": 4.92 if setting == "base" else 5.0,
            "paper_bleu": 25.8 if setting == "base" else 25.5,
            "paper_params_m": 65 if setting == "base" else None, "scale": "demo",
            "code": "848a4c4eb0a5", "machine": "2-core, 24 GiB",
            "started": f"2026-12-06T00:{10 * i:02d}:00+00:00"})
    return rows


def _folder(path: Path, rows: list[dict], heading: str | None = HEADING) -> Path:
    path.mkdir()
    with (path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, build.columns())
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    if heading is not None:
        (path / "results.md").write_text(heading)
    return path


def _convert(folder: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "experiments.records_from_csv", str(folder),
                           *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _table(text: str, section: str) -> dict[str, dict[str, str]]:
    """{(first cells joined by '/'): {column: cell}} of the first table under ``section``."""
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        key = cells[0] if section == "Settings" else f"{cells[0]}/{cells[1]}"
        out[key] = dict(zip(header, cells, strict=True))
    return out


def test_the_recomputed_report_is_worked_out_by_hand(tmp_path):
    folder = _folder(tmp_path / "heads", _runs())
    run = _convert(folder)
    assert run.returncode == 0, run.stderr
    assert "wrote 7 files" in run.stdout  # sweep.json and six runs
    paths = build.report(folder)  # from the records alone: no workdir exists
    text = paths["markdown"].read_text()
    assert text.startswith("# heads\n\nHeads against base.\n\nscale: demo; ")
    # The six attempts: the last starts at 50 min and runs 631.2 s, so 60 min 31 s end to
    # end; CPU 5 x 540 + 600 = 3,300 s = 55 minutes.
    assert "sweep end to end 60 min 31 s (55 CPU-minutes)" in text
    sets = _table(text, "Settings")
    # base: PPL 1.25, 1.26, 1.27 -> 1.26 ± 0.01; BLEU 80, 82, 84 -> 82.0 ± 2.0.
    assert (sets["base"]["dev PPL"], sets["base"]["test BLEU"]) == ("1.26 ± 0.01", "82.0 ± 2.0")
    # A_h4: PPL 1.30, 1.33, 1.36 -> 1.33 ± 0.03; BLEU 81, 84, 87 -> 84.0 ± 3.0.
    assert (sets["A_h4"]["dev PPL"], sets["A_h4"]["test BLEU"]) == ("1.33 ± 0.03", "84.0 ± 3.0")
    assert sets["A_h4"]["model"] == "3 x 128/512, 4 x 32" and sets["A_h4"]["n"] == "3"
    assert sets["base"]["test chrF"] == "-" and sets["base"]["paper PPL"] == "4.92"
    verdicts = _table(text, "Against the baseline")
    assert set(verdicts) == {"A_h4/dev PPL", "A_h4/test BLEU"}  # no chrF: m = 2
    # Seed by seed, PPL differences 0.05, 0.07, 0.09: mean 0.07, sd 0.02, t = 0.07 /
    # (0.02 / sqrt 3) = 6.062 on 2 df; Student's t on 2 df has p = 1 - t / sqrt(2 + t^2)
    # = 0.0261. BLEU 1, 2, 3: t = 2 sqrt 3 = 3.464, p = 0.0742. Holm: 2 x 0.0261 = 0.052,
    # then 0.074. The intervals at 97.5%: t on 2 df at 0.9875 is sqrt(2 u^2 / (1 - u^2)),
    # u = 0.975: 6.205; 0.07 ± 6.205 x 0.01155 and 2 ± 6.205 x 0.5774.
    ppl, bleu = verdicts["A_h4/dev PPL"], verdicts["A_h4/test BLEU"]
    assert [ppl[k] for k in ("Δ", "design", "se test", "p", "p Holm", "verdict")] == \
        ["+0.070", "paired", "-", "0.026", "0.052", "not resolved"]
    assert ppl["interval"] == "[-0.002, +0.142]"
    assert [bleu[k] for k in ("Δ", "sd", "p", "p Holm", "interval")] == \
        ["+2.00", "3.00 / 2.00", "0.074", "0.074", "[-1.58, +5.58]"]
    assert "between runs only: these runs kept no sentence statistics" in text
    assert "code 848a4c4eb0a5" in text


def test_a_record_is_the_row_the_report_makes(tmp_path):
    folder = _folder(tmp_path / "heads", _runs())
    assert _convert(folder).returncode == 0
    row, arrays = archive.read_one(folder / "records" / "A_h4,seed=2.npz")
    assert arrays == {}
    # As JSON, so that 450 and 450.0 differ, and the keys come in the report's order.
    assert json.dumps(row) == json.dumps({
        "point": "A_h4,seed=2", "setting": "A_h4", "seed": 2, "variant": "A_h4",
        "value": "A_h4", "status": "finished", "kind": "finished", "params": 1516392,
        "steps": 450, "num_steps": 450, "wall_s": 631.2, "cpu_s": 600.0,
        "tokens_per_s": 1700.5, "dev_loss": math.log(1.36), "dev_ppl": 1.36,
        "dev_bleu": None, "test_bleu": 87.0, "test_chrf": None, "bleu_sentences": 300,
        "paper_ppl": 5.0, "paper_bleu": 25.5, "paper_params_m": None, "scale": "demo",
        "N": 3, "d_model": 128, "d_ff": 512, "h": 4, "d_k": 32, "d_v": 32, "P_drop": 0.1,
        "eps_ls": 0.1, "positions": "sinusoidal", "machine": "2-core, 24 GiB",
        "started": "2026-12-06T00:50:00+00:00",
        "attempts": [{"started": "2026-12-06T00:50:00+00:00", "wall_s": 631.2,
                      "cpu_s": 600.0, "machine": "2-core, 24 GiB"}],
        "curve": [], "provenance": [{"code": "848a4c4eb0a5"}], "code": "848a4c4eb0a5"})
    # paper.TABLE3 gives base's parameters as the int 65, a cell of a number column that
    # results.csv wrote without a point.
    base, _ = archive.read_one(folder / "records" / "base,seed=0.npz")
    assert json.dumps([base["paper_params_m"], base["dev_ppl"]]) == "[65, 1.25]"
    # The keys the report's own reader makes of a workdir (a gone one: no config columns).
    made = build._row(tmp_path / "gone", {"name": "x", "variant": "base", "value": 1}, {})
    config = {c for c, _, _ in build.CONFIG_COLUMNS}
    assert set(row) == set(made) - set(archive.NOT_KEPT) | config


def test_flags_stand_in_for_a_missing_heading(tmp_path):
    folder = _folder(tmp_path / "heads", _runs(), heading=None)
    run = _convert(folder)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert run.stderr == f"error: {folder}/results.md does not state the sweep's name: " \
                         "give --name\n"
    assert not (folder / "records").exists()
    run = _convert(folder, "--name=heads", "--parameter=h", "--description=Heads")
    assert run.returncode == 0, run.stderr
    definition, rows = archive.read(folder)
    assert (definition["name"], definition["parameter"], definition["scale"]) == \
        ("heads", "h", "")
    assert [p["name"] for p in definition["points"]] == [r["point"] for r in _runs()]


@pytest.mark.parametrize(("column", "cell", "message"), [
    ("steps", "450.5", "line 4: steps='450.5' is not a whole number"),
    ("dev_ppl", "low", "line 4: dev_ppl='low' is not a number"),
    ("status", "done", "line 4: status='done' is not one of finished, pruned, diverged"),
    ("point", "base,seed=0", "line 4: point 'base,seed=0' twice"),
])
def test_a_bad_cell_is_named_in_one_line_and_nothing_is_written(tmp_path, column, cell,
                                                                message):
    rows = _runs()
    rows[2][column] = cell  # the CSV's line 4
    folder = _folder(tmp_path / "heads", rows)
    run = _convert(folder)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"error: {folder}/results.csv {message}")
    assert not (folder / "records").exists()
