"""Evaluate a trained workdir on a split: perplexity and both BLEUs, translations written.

    python -m transformer_jax.evaluate --workdir=runs/base --split=test --average=5 \
        [--limit=N] [--config.decode.beam_size=4 ...]
    python -m transformer_jax.evaluate --workdir=runs/base --sentence_stats

``--sentence_stats`` writes a finished run's sentence statistics (eval/sentence_stats.npz,
what the comparison report's statistics read) as the end of training writes them, for a
run trained before it did.

The library is :mod:`transformer_jax.evaluation.score`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from transformer_jax import cli
from transformer_jax.config import resume

# Fields of the saved config that --config.FIELD=VALUE may change when evaluating.
EVALUATE_OVERRIDES = ("decode", "data.data_dir", "data.eval_files", "data.test_files",
                      "data.tokens_per_batch")


def main(argv: list[str], flags_: dict[str, Any]) -> None:
    from tqdm import tqdm

    from transformer_jax.data.pipeline import DataSpec
    from transformer_jax.evaluation import restore, score, translation

    cli.no_extra_args(argv)
    with cli.clean_errors():
        workdir = flags_["workdir"].value
        config = resume.workdir_config(workdir, cli.override_values(flags_["config"]),
                                    EVALUATE_OVERRIDES)
        # The config read once: the run's spec and its data's.
        run, data = restore.WorkdirSpec.from_config(config), DataSpec.from_config(config)
        if flags_["sentence_stats"].value:
            r = score.write_sentence_stats(workdir, run, data)
            print(f"{workdir}: validation PPL {r['validation_ppl']:.4f} over {r['sentences']} "
                  f"sentences (checkpoint(s) {', '.join(map(str, r['checkpoints']))}), "
                  f"{r['test_sentences']} test sentences' BLEU and chrF statistics written")
            return
        split, average = flags_["split"].value, flags_["average"].value
        with tqdm(desc=f"translating {split}", unit=" sentences", file=sys.stderr,
                  leave=False) as bar:
            r = score.evaluate_workdir(workdir, run, data, split, average,
                                       flags_["limit"].value, bar.update)
        steps = ", ".join(map(str, r["checkpoints"]))
        print(f"{split}: {r['sentences']} sentences; parameters of checkpoint(s) {steps}"
              f"{' averaged' if len(r['checkpoints']) > 1 else ''}; "
              f"{translation.describe(r['decode'])}")
        for note in r["notes"]:
            print(f"warning: {note}")
        print(f"perplexity: {r['perplexity']:.3f}")
        print(f"BLEU (sacreBLEU, detokenized): {r['bleu']:.2f}  {r['bleu_signature']}")
        print(f"BLEU (tokenized, compound-split, as in the paper): {r['tokenized_bleu']:.2f}  "
              f"{r['tokenized_bleu_signature']}")
        print(f"wrote {r['files'][0]} and {r['files'][1]}")
        long = [translation.LongInput(**x) for x in r["shortened_sources"]]
        for line in translation.shortened_report(f"{split} sentence", long, r["sentences"],
                                                 f"{split} sentences", r["source_limit"]):
            print(line, file=sys.stderr)


if __name__ == "__main__":
    from absl import flags

    cli.run(functools.partial(main, flags_={
        "workdir": cli.define_workdir_flag(),
        "config": cli.define_overrides_flag(),
        "split": flags.DEFINE_enum("split", "test", ["validation", "test"],
                                   "The split to evaluate on."),
        "average": flags.DEFINE_integer(
            "average", None, "Average the parameters of the last N checkpoints; 1: the latest "
            "alone. Default: the run's train.average_checkpoints (0: train.keep_checkpoints; the "
            "paper's 5 for base, 20 for big), or all the workdir holds if fewer.",
            lower_bound=1),
        "limit": flags.DEFINE_integer("limit", 0, "Only the first N sentences (0: all).",
                                      lower_bound=0),
        "sentence_stats": flags.DEFINE_bool(
            "sentence_stats", False, "Write a finished run's sentence statistics "
            "(eval/sentence_stats.npz) from the checkpoint it evaluated and its test "
            "translations, as the end of training writes them; nothing else."),
    }))
