"""Preparation throughput of WMT14 EN-DE through TFDS's real builder, on local archives.

    python experiments/benchmarks/prepare_wmt.py [--pairs=200000]

Writes statmt's archives for ``wmt14_translate/de-en`` (``data/statmt_mirror.py``) holding
``--pairs`` training pairs of random words at WMT-like lengths (split between Europarl,
Common Crawl and News Commentary as the real ones are, 42 : 53 : 5), newstest2013 (3,000)
and newstest2014 (3,003), then runs ``transformer_jax.data.prepare.prepare("wmt14_ende")`` in
a fresh process against the local mirror: download (from the local proxy), extraction,
parsing and the array_record writing. Prints pairs/s and the preparing process's peak RSS,
extrapolated to the real 4,508,785 training pairs (an extrapolation: no network time, and the
memory scaled by the largest file, which TFDS's parser reads whole). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import string
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# TFDS's counts for wmt14_translate/de-en (docs/data.md): train, and its largest subset.
REAL_TRAIN_PAIRS = 4_508_785
REAL_COMMONCRAWL_PAIRS = 2_399_123
TRAIN_SHARES = {"europarl_v7": 0.42, "commoncrawl": 0.53, "newscommentary_v9": 0.05}
DEV_PAIRS = {"newstest2013": 3_000, "newstest2014": 3_003}


def random_pairs(num_pairs: int, seed: int, vocab: int = 200_000) -> list[tuple[str, str]]:
    """(German-like, English-like) pairs of random words: lengths log-normal around WMT14's
    (median ~20 words, long tail clipped at 150), words drawn Zipf-like from two ``vocab``
    word lists (so a 37,000-piece vocabulary has text enough to learn from)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase + "äöüß"))

    def words(n: int) -> np.ndarray:
        lengths = rng.integers(2, 11, n)
        flat = rng.choice(letters, lengths.sum())
        return np.array(["".join(w) for w in np.split(flat, np.cumsum(lengths)[:-1])])

    de_words, en_words = words(vocab), words(vocab)
    ranks = np.arange(1, vocab + 1)
    p = 1.0 / ranks
    p /= p.sum()
    lengths = np.clip(rng.lognormal(np.log(20), 0.6, num_pairs), 1, 150).astype(int)
    de_lengths = np.clip((lengths * rng.normal(1.0, 0.1, num_pairs)).astype(int), 1, 150)
    de_ids = rng.choice(vocab, de_lengths.sum(), p=p)
    en_ids = rng.choice(vocab, lengths.sum(), p=p)
    de_cut, en_cut = np.cumsum(de_lengths)[:-1], np.cumsum(lengths)[:-1]
    return [(" ".join(d).capitalize() + ".", " ".join(e).capitalize() + ".")
            for d, e in zip(np.split(de_words[de_ids], de_cut),
                            np.split(en_words[en_ids], en_cut), strict=True)]


def write_wmt_like(directory: Path, train_pairs: int, seed: int = 0) -> dict[str, Path]:
    """statmt's de-en archives of ``train_pairs`` training pairs (and the two newstests)."""
    from transformer_jax.data import statmt_mirror

    counts = {name: int(round(share * train_pairs)) for name, share in TRAIN_SHARES.items()}
    counts["europarl_v7"] += train_pairs - sum(counts.values())
    counts.update(DEV_PAIRS)
    pairs = random_pairs(sum(counts.values()), seed)
    subsets, start = {}, 0
    for name, n in counts.items():
        subsets[name] = pairs[start:start + n]
        start += n
    return statmt_mirror.write_archives(directory, ("de", "en"), subsets)


def _prepare_here(archives: dict[str, Path], data_dir: str, out: multiprocessing.Queue) -> None:
    import tensorflow_datasets as tfds

    from transformer_jax.data import prepare, statmt_mirror

    prepare.tfds_dataset("wmt14_ende")  # imports TFDS's builder
    import tensorflow  # noqa: F401  (TFDS's extractor imports it: counted before, not in)

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    with statmt_mirror.serve(archives, tfds.builder_cls("wmt14_translate")):
        counts = prepare.prepare("wmt14_ende", data_dir)
    out.put({"seconds": time.perf_counter() - start, "counts": counts,
             "rss_before": rss_before,
             "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


def run(train_pairs: int, work: Path) -> dict[str, float]:
    start = time.perf_counter()
    archives = write_wmt_like(work / "statmt", train_pairs)
    write_s = time.perf_counter() - start
    archive_bytes = sum(p.stat().st_size for p in archives.values())
    out = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(
        target=_prepare_here, args=(archives, str(work / "tfds"), out))
    child.start()
    result = out.get()
    child.join()
    train = result["counts"]["train"]
    total = sum(result["counts"].values())
    dataset_bytes = sum(f.stat().st_size for f in (work / "tfds" / "wmt14_translate").rglob("*")
                        if f.is_file())
    per_s = total / result["seconds"]
    cc_here = int(round(TRAIN_SHARES["commoncrawl"] * train_pairs))
    grown = result["peak_rss"] - result["rss_before"]
    return {
        "train_pairs": train, "all_pairs": total, "write_archives_s": write_s,
        "archive_mb": archive_bytes / 2**20, "dataset_mb": dataset_bytes / 2**20,
        "prepare_s": result["seconds"], "pairs_per_s": per_s,
        "peak_rss_mb": result["peak_rss"] / 2**20,
        "rss_before_prepare_mb": result["rss_before"] / 2**20,
        # Extrapolations to the real de-en (no download time: statmt's speed dominates it).
        "extrapolated_4_5m_prepare_min": (REAL_TRAIN_PAIRS + sum(DEV_PAIRS.values()))
        / per_s / 60,
        "extrapolated_4_5m_peak_rss_gb": (result["rss_before"] + grown
                                          * REAL_COMMONCRAWL_PAIRS / cc_here) / 2**30,
        "extrapolated_4_5m_dataset_gb": dataset_bytes / total
        * (REAL_TRAIN_PAIRS + sum(DEV_PAIRS.values())) / 2**30,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=200_000, help="training pairs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        m = run(args.pairs, Path(tmp))
    print(f"wmt14_translate/de-en from local statmt archives ({m['archive_mb']:.0f} MB), "
          f"{m['all_pairs']:,} pairs ({m['train_pairs']:,} train), on {os.cpu_count()} CPUs")
    print(f"  archives written in {m['write_archives_s']:.0f} s (not part of preparing)")
    print(f"  prepared in {m['prepare_s']:.1f} s: {m['pairs_per_s']:,.0f} pairs/s, "
          f"peak RSS {m['peak_rss_mb']:.0f} MB ({m['rss_before_prepare_mb']:.0f} MB with TFDS "
          f"and TensorFlow imported), "
          f"dataset {m['dataset_mb']:.0f} MB")
    print(f"  extrapolated to 4.5M pairs: {m['extrapolated_4_5m_prepare_min']:.0f} min of "
          f"preparing after the download, peak RSS ~{m['extrapolated_4_5m_peak_rss_gb']:.1f} "
          f"GB, dataset ~{m['extrapolated_4_5m_dataset_gb']:.2f} GB")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in m.items()}))


if __name__ == "__main__":
    main()
