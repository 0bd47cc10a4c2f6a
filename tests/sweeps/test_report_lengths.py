"""Test BLEU by source length (compare --by_length): buckets of the test sentences by their
source's words, each seed's BLEU on them, the paired test within each bucket, the table, the
plot, and the sources read from the sweep's own dataset."""

import json
import subprocess
import sys
from pathlib import Path

import ml_collections
import pytest
import sacrebleu
from hypothesis import given, settings, strategies as st

from transformer_jax.data import sources as data_sources
from transformer_jax.errors import UserError
from transformer_jax.sweeps.experiment import load_experiment
from transformer_jax.sweeps.report import (
    build,
    lengths as report_lengths,
    settings as report_settings,
)
from transformer_jax.sweeps.run import run_sweep

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def test_bucket_edges_are_parsed_or_refused_in_one_line():
    assert report_lengths.parse_edges("16,24,32") == [(1, 16), (17, 24), (25, 32)]
    assert report_lengths.parse_edges("5") == [(1, 5)]
    for bad in ("", "16,8", "0,4", "a,b", "4,4"):
        with pytest.raises(UserError, match=f"^--by_length={bad}: give increasing source "):
            report_lengths.parse_edges(bad)


def references(n):
    return [f"der Hund {i} hat den Ball {i} heute gesehen ." for i in range(n)]


def damaged(sentence):
    words = sentence.split()
    return " ".join(words[:3] + words[5:])


def write_run(workdir, hyps, refs, seed):
    (workdir / "eval").mkdir(parents=True)
    (workdir / "eval" / "test-final.hyp.txt").write_text("\n".join(hyps) + "\n")
    (workdir / "eval" / "test-final.ref.txt").write_text("\n".join(refs) + "\n")
    (workdir / "final_metrics.json").write_text(json.dumps({
        "step": 450, "perplexity": 1.5, "loss": 1.0, "test_bleu": 50.0 + seed,
        "bleu_sentences": len(refs), "test_hypotheses": "eval/test-final.hyp.txt",
        "test_references": "eval/test-final.ref.txt"}))
    (workdir / "metrics.jsonl").write_text(json.dumps(
        {"split": "train", "step": 450, "loss": 1.0}) + "\n")


@pytest.fixture(scope="module")
def lengths_root(tmp_path_factory, builtin_data_dir):
    """A sweep of two kernels over 2 seeds at the demo scale, on the built-in corpus, written
    by hand: "local" translates every test sentence right, "dense" damages those whose
    source has more than 8 words."""
    root = tmp_path_factory.mktemp("lengths") / "root"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        sweep = load_experiment("configs/demo.py:base", ["model.attention=dense,local"], 2)
        run_sweep(sweep, str(root), "print", "demo",
                  overrides={"data.data_dir": str(builtin_data_dir)})
    config = json.loads((root / "sweep.json").read_text())["points"][0]["config"]
    test = data_sources.get_source(ml_collections.ConfigDict(config["data"]), "test")
    srcs = [test[i][0] for i in range(60)]
    refs = references(60)
    for seed in range(2):
        write_run(root / f"attention=local,seed={seed}", refs, refs, seed)
        hyps = [damaged(r) if len(s.split()) > 8 else r for s, r in zip(srcs, refs,
                                                                          strict=True)]
        write_run(root / f"attention=dense,seed={seed}", hyps, refs, seed)
    return root, srcs, refs


@pytest.mark.slow
def test_each_bucket_scores_its_own_sentences_and_tests_them_in_pairs(lengths_root, tmp_path):
    root, srcs, refs = lengths_root
    paths = build.report(root, tmp_path, "attention=dense", by_length="8,40")
    rows = report_lengths.by_length(
        report_settings.settings(build.collect(root)[1]),
        next(e for e in report_settings.settings(build.collect(root)[1])
             if e["setting"] == "attention=dense"),
        srcs, [(1, 8), (9, 40)])
    short = [i for i, s in enumerate(srcs) if len(s.split()) <= 8]
    long = [i for i, s in enumerate(srcs) if 9 <= len(s.split()) <= 40]
    assert short and long
    dense_long = sacrebleu.corpus_bleu([damaged(refs[i]) for i in long],
                                       [[refs[i] for i in long]]).score
    by = {(r["setting"], r["bucket"]): r for r in rows}
    assert by["attention=dense", (1, 8)]["seeds"] == pytest.approx([100.0, 100.0])
    assert by["attention=dense", (9, 40)]["seeds"] == pytest.approx([dense_long] * 2)
    assert by["attention=local", (9, 40)]["seeds"] == pytest.approx([100.0, 100.0])
    assert by["attention=dense", (9, 40)]["sentences"] == len(long)
    # The damaged translations lose two words of ten (13a tokens, by sacreBLEU's counts).
    ratio = (sum(sacrebleu.BLEU().corpus_score([damaged(refs[i])], [[refs[i]]]).sys_len
                 for i in long) / sum(sacrebleu.BLEU().corpus_score(
                     [refs[i]], [[refs[i]]]).ref_len for i in long))
    assert by["attention=dense", (9, 40)]["length_ratio"][0] == pytest.approx(ratio)
    assert ratio == pytest.approx(0.8, abs=0.05)
    assert by["attention=local", (9, 40)]["length_ratio"][0] == 1.0
    # Within the long bucket local is significantly better, its two runs against dense's two
    # (the same translations on both seeds: only the test set's share varies); within the
    # short one the two translate alike (p = 1).
    test = by["attention=local", (9, 40)]["test"]
    assert test.significant and (test.n_a, test.n_b) == (2, 2) and test.sentences == len(long)
    assert test.delta == pytest.approx(100.0 - dense_long) and test.paired
    assert test.se_run == 0 and test.se_test > 0
    assert by["attention=local", (1, 8)]["test"].p == 1.0
    table = paths["by_length_markdown"].read_text()
    assert f"| 1-8 words ({len(short)}) | 9-40 words ({len(long)}) |" in table
    assert "| attention=local | 100.0 ± 0.0 (Δ +0.0, p 1.000) | 100.0 ± 0.0 (**Δ +" in table
    assert paths["by_length_plot"].read_bytes()[:8] == PNG
    assert len(paths["by_length_csv"].read_text().splitlines()) == 1 + 2 * 2


# Two command-line processes: about 20 CPU-seconds.
@pytest.mark.slow
def test_the_compare_command_writes_the_buckets(lengths_root, tmp_path):
    root, _, _ = lengths_root
    ran = subprocess.run([sys.executable, "-m", "transformer_jax.compare", str(root),
                          f"--out={tmp_path}", "--by_length=8,40"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "test BLEU by source length" in ran.stdout
    assert {"bleu_by_length.md", "bleu_by_length.csv", "bleu_by_length.png"} <= {
        p.name for p in tmp_path.iterdir()}
    refused = subprocess.run([sys.executable, "-m", "transformer_jax.compare", str(root),
                              f"--out={tmp_path}", "--by_length=40,8"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith("error: --by_length=40,8: ")


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="0123456789,-. a", max_size=12))
def test_any_bucket_flag_is_taken_or_refused_in_one_line(text):
    try:
        buckets = report_lengths.parse_edges(text)
    except UserError as e:
        assert str(e).startswith(f"--by_length={text}: ") and "\n" not in str(e)
        return
    assert buckets[0][0] == 1 and all(lo <= hi for lo, hi in buckets)
    assert all(b[0] == a[1] + 1 for a, b in zip(buckets, buckets[1:], strict=False))
