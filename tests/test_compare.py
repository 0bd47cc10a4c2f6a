"""The comparison report: our figures beside the paper's Table 3, plots, and missing, failed
and unfinished points marked rather than fatal."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax import compare, hyper, sweep as sweep_lib

from .helpers import BROKEN_POINT, tiny_experiment
from .test_paper import TABLE3

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


def _rows(path):
    """{point: {column: cell}} of a Markdown table."""
    lines = [line for line in Path(path).read_text().splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(header, cells, strict=True))
            for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


def test_paper_columns_are_table_3_for_every_variant(tmp_path):
    # The print launcher records every variant's point without training any.
    root = tmp_path / "all"
    sweep = sweep_lib.Sweep("all", "configs/table3.py", hyper.sweep("variant", TABLE3),
                            parameter="variant")
    sweep_lib.run_sweep(sweep, str(root), "print")
    paths = compare.report(root)
    rows = _rows(paths["markdown"])
    assert list(rows) == list(TABLE3)
    for variant, (ppl, bleu, params) in TABLE3.items():
        row = rows[variant]
        assert row["status"] == "missing"
        assert row["paper PPL"] == f"{ppl:.2f}" and row["paper BLEU"] == f"{bleu:.1f}"
        assert row["paper params"] == (f"{params}M" if params else "-")
        assert row["dev PPL"] == row["dev BLEU"] == row["steps"] == "-"
    # The model column from each point's config: N x d_model/d_ff, h x d_k.
    assert rows["A_h1"]["model"] == "6 x 512/2048, 1 x 512"
    assert rows["base"]["model"] == "6 x 512/2048, 8 x 64"
    assert rows["C_d1024"]["model"] == "6 x 1024/2048, 8 x 128"
    assert rows["big"]["model"] == "6 x 1024/4096, 16 x 64"
    with open(paths["csv"]) as f:
        table = {r["point"]: r for r in csv.DictReader(f)}
    assert float(table["A_h1"]["paper_ppl"]) == 5.29 and float(table["A_h1"]["paper_bleu"]) == 24.9
    assert table["A_h1"]["paper_params_m"] == "" and table["C_d1024"]["paper_params_m"] == "168"
    assert table["A_h1"]["dev_ppl"] == "" and table["A_h1"]["status"] == "missing"
    assert (table["B_dk16"]["d_k"], table["B_dk16"]["d_v"]) == ("16", "64")
    assert (table["D_ls02"]["eps_ls"], table["E_learned"]["positions"]) == ("0.2", "learned")


@pytest.fixture(scope="module")
def mixed_root(tiny_sweep, tmp_path_factory, builtin_data_dir):
    """A sweep root with a finished, an unfinished, a failed and a missing point."""
    _, first_root, _ = tiny_sweep
    tmp_path = tmp_path_factory.mktemp("compare")
    root = tmp_path / "root"
    shutil.copytree(first_root, root)
    # The same sweep, grown: D_ls0 asked for 20 steps, and a point never run.
    grown = tiny_experiment(tmp_path / "grown.py", builtin_data_dir, points=(
        "{'variant': 'base'}, {'name': 'D_ls0', 'variant': 'D_ls0', 'train.num_steps': 20}, "
        f"{BROKEN_POINT}, {{'variant': 'D_ls02'}}"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        sweep_lib.run_sweep(sweep_lib.load_experiment(grown), str(root), "print")
    return root


@pytest.mark.slow  # 6 s, after the shared tiny sweep's 3.5 min (on a busy 2-core machine)
def test_report_marks_missing_failed_and_unfinished_points(mixed_root, tmp_path):
    out = tmp_path / "report"
    paths = compare.report(mixed_root, out)
    rows = _rows(paths["markdown"])
    assert list(rows) == ["base", "D_ls0", "broken", "D_ls02"]
    assert rows["base"]["status"] == "finished" and rows["base"]["steps"] == "10"
    assert rows["D_ls0"]["status"] == "unfinished (step 10 of 20)"
    assert rows["broken"]["status"].startswith("failed (exit ")
    assert rows["D_ls02"]["status"] == "missing"
    final = json.loads((mixed_root / "base" / "final_metrics.json").read_text())
    assert rows["base"]["dev PPL"] == f"{final['perplexity']:.2f}"
    assert rows["base"]["test BLEU"] == f"{final['test_bleu']:.1f}"
    assert rows["base"]["paper PPL"] == "4.92" and rows["D_ls02"]["paper BLEU"] == "25.7"
    for point in ("broken", "D_ls02"):
        assert rows[point]["dev PPL"] == rows[point]["tokens/s"] == "-"
    assert rows["base"]["wall time"] != "-" and rows["D_ls02"]["wall time"] == "-"
    text = paths["markdown"].read_text()
    assert "machine: " in text
    # Validation BLEU, logged at the tiny sweep's last step (10).
    bleu = [json.loads(line)["bleu"] for line in
            (mixed_root / "base" / "metrics.jsonl").read_text().splitlines() if '"bleu"' in line]
    assert rows["base"]["dev BLEU"] == f"{bleu[-1]:.1f}" and rows["broken"]["dev BLEU"] == "-"
    for name in ("loss_curves", "against_value"):
        data = paths[name].read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000
    assert paths["against_value"].name == "dev_vs_eps_ls.png"
    with open(paths["csv"]) as f:
        table = {r["point"]: r for r in csv.DictReader(f)}
    assert int(table["base"]["params"]) > 0 and table["D_ls02"]["steps"] == ""
    assert float(table["base"]["wall_s"]) > 0 and float(table["base"]["cpu_s"]) > 0


def test_compare_command_refuses_a_missing_directory_in_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "transformer_jax.compare",
                          str(tmp_path / "nothing")], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2
    missing = tmp_path / 'nothing'
    assert run.stderr.strip().splitlines()[-1] == f"error: {missing}: no such directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception, match="holds no sweep.json and no training run"):
        compare.collect(empty)
