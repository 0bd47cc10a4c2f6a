"""Write a sweep's comparison report: the command of :mod:`transformer_jax.sweeps.report.build`.

    python -m transformer_jax.compare runs/heads_ablation [--out=DIR] [--baseline=SETTING] \
        [--by_length=16,24,32]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from absl import flags

from transformer_jax import cli
from transformer_jax.errors import UserError
from transformer_jax.io import storage
from transformer_jax.sweeps.report import build


def main(argv: Sequence[str], out_flag: Any, baseline_flag: Any, by_length_flag: Any) -> None:
    with cli.clean_errors():
        if len(argv) != 2:
            raise UserError("give one sweep directory, e.g. "
                            "python -m transformer_jax.compare runs/heads_ablation")
        if out_flag.value:
            storage.check(out_flag.value, "--out")
        paths = build.report(argv[1], out_flag.value, baseline_flag.value,
                              by_length_flag.value)
        print(paths["markdown"].read_text())
        if "table3" in paths:
            print(paths["table3"].read_text())
        if "by_length_markdown" in paths:
            print(paths["by_length_markdown"].read_text())
        print("wrote " + ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    cli.run(functools.partial(
        main, out_flag=cli.define_path_flag(
            "out", "Where the report goes (default: the sweep's directory).", required=False),
        baseline_flag=flags.DEFINE_string(
            "baseline", None, "The setting others are tested against (default: the base "
            "variant's, else the first)."),
        by_length_flag=flags.DEFINE_string(
            "by_length", None, "Also test BLEU by source length: the buckets' upper edges in "
            "words, e.g. 16,24,32 (1-16, 17-24, 25-32).")))
