"""Every results folder that keeps its runs' records recomputes to the tables committed in it:
``python -m transformer_jax.compare experiments/results/NAME`` rewrites results.md (and
table3.md) from the folder's records alone, and every table of the folder's README.md is one
of those tables, line for line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from transformer_jax.sweeps.report import archive, build

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"
FOLDERS = sorted(p for p in RESULTS.iterdir() if archive.holds_records(p))
TABLES = ("results.md", "table3.md")


def tables(text: str) -> list[str]:
    """The Markdown tables of a text, each as its lines joined."""
    out, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            out.append("\n".join(current))
            current = []
    return out


def test_some_folder_keeps_records():
    assert FOLDERS, "no results folder keeps records/"


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_committed_tables_are_what_compare_recomputes(folder, tmp_path, monkeypatch):
    monkeypatch.chdir(RESULTS.parents[1])  # the folder named as a command names it
    paths = build.report(folder.relative_to(RESULTS.parents[1]), tmp_path)
    recomputed = {}
    for name in TABLES:
        committed = folder / name
        if name == "table3.md" and "table3" not in paths:
            assert not committed.exists(), f"{committed}: compare writes no table3.md here"
            continue
        fresh = (tmp_path / name).read_text()
        assert committed.read_text() == fresh, f"{committed} differs from what compare writes"
        recomputed[name] = fresh
    readme = (folder / "README.md").read_text()
    known = [t for text in recomputed.values() for t in tables(text)]
    for table in tables(readme):
        header = table.splitlines()[0]
        assert table in known, f"{folder / 'README.md'}: the table headed {header!r} is not " \
                               "one compare writes"
    assert not re.search(r"p = 0\.001\b", readme), "a resampling floor printed as a p-value"


def test_the_aa_comparison_recomputes_to_its_table():
    """Base against base on disjoint seeds (experiments/results/aa_base_demo): aa.md is what
    its script computes from heads_ablation_demo's records, the README's table is aa.md's,
    and the run-level statistics call no difference."""
    from experiments.results.aa_base_demo import aa

    folder = RESULTS / "aa_base_demo"
    text = aa.markdown()
    assert (folder / "aa.md").read_text() == text
    assert tables((folder / "README.md").read_text()) == tables(text)
    assert "| **higher** |" not in text and "| **lower** |" not in text
