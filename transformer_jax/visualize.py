"""Pictures of a trained model for one sentence: the command of
:mod:`transformer_jax.analysis.pictures`.

    python -m transformer_jax.visualize --workdir=runs/demo --out=runs/demo/pictures \
        --src="the small dog sees the old house ." [--tgt="..."]
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from transformer_jax import cli
from transformer_jax.errors import UserError
from transformer_jax.io import layout


def main(argv: list[str], flags: dict[str, Any]) -> None:
    from transformer_jax.analysis import attention_cost, attention_read, pictures
    from transformer_jax.config import resume
    from transformer_jax.evaluation import restore
    from transformer_jax.io import storage

    cli.no_extra_args(argv)
    with cli.clean_errors():
        if not flags["src"].value.strip():
            raise UserError("--src is empty; give a sentence to run through the model")
        workdir = flags["workdir"].value
        if flags["measured"].value:  # read now, not after the model has run
            attention_cost.measured_memory(flags["measured"].value)
        out = flags["out"].value or os.fspath(storage.path(workdir) / layout.PICTURES)
        storage.check(out, "--out")
        model = attention_read.load_model(workdir, restore.WorkdirSpec.from_config(
            resume.workdir_config(workdir)))
        logging.info("loaded step %d of %s", model.step, workdir)
        written = pictures.write_pictures(out, model, flags["src"].value, flags["tgt"].value,
                                          flags["measured"].value)
        for path in written:
            print(path)


if __name__ == "__main__":
    from absl import flags as absl_flags

    from transformer_jax.analysis import attention_cost

    cli.run(functools.partial(main, flags={
        "workdir": cli.define_workdir_flag(),
        "src": absl_flags.DEFINE_string("src", None, "Source sentence.", required=True),
        "tgt": absl_flags.DEFINE_string("tgt", None, "Target sentence; default: the model's "
                                        "greedy translation."),
        "out": cli.define_path_flag("out", "Output folder; default WORKDIR/pictures.",
                                    required=False),
        "measured": cli.define_path_flag(
            "measured", "Attention-scaling results to plot; default the checkout's "
            f"{attention_cost.MEASURED_FILE.relative_to(attention_cost.CHECKOUT)} if present, "
            "else measured here at compile time.", required=False),
    }))
