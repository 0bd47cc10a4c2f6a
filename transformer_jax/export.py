"""Export a trained model to another engine: the command-line entry point.

    python -m transformer_jax.export ctranslate2 --workdir=runs/base --out=DIR \
        [--average=5] [--quantization=int8]
    python -m transformer_jax.export hf --workdir=runs/base --out=DIR [--average=5]
    python -m transformer_jax.export hf --from_hf=DIR --out=WORKDIR

The first argument names the target (``transformer_jax/exports/``; docs/export.md). ``--out``
must not exist; it is written beside under a temporary name and renamed when complete.
``hf --from_hf`` reads a MarianMT directory back into a new workdir.
"""

from __future__ import annotations

import functools
from typing import Any

from transformer_jax import cli

# The flags that are options of some targets' export (exports.Traits.options).
OPTIONS = ("quantization",)


def main(argv: list[str], flags_: dict[str, Any]) -> None:
    with cli.clean_errors():
        from transformer_jax import exports
        from transformer_jax.config import resume
        from transformer_jax.errors import UserError

        if len(argv) != 2:
            raise UserError(f"name one export target ({', '.join(exports.names())}), e.g. "
                            "python -m transformer_jax.export ctranslate2 --workdir=W --out=D")
        name, out = argv[1], flags_["out"].value
        from_hf = flags_["from_hf"].value
        if from_hf:
            if name != "hf":
                raise UserError(f"--from_hf reads a MarianMT directory: the target is hf, "
                                f"not {name}")
            from transformer_jax.exports import from_hf as marian
            from transformer_jax.training import warm_start
            from transformer_jax.training.spec import TrainingSpec

            marian.import_directory(from_hf, out, lambda workdir, params: (
                warm_start.save_initial(TrainingSpec.from_config(
                    resume.workdir_config(workdir)), workdir, params)))
            return
        if not flags_["workdir"].value:
            raise UserError("--workdir: the trained run to export")
        target = exports.get(name)
        options = {}
        for option in OPTIONS:
            if flags_[option].value is None:
                continue
            if option not in target.traits.options:
                takers = [n for n in exports.names() if option in exports.get(n).traits.options]
                raise UserError(f"--{option} is for the {', '.join(takers)} target, not {name}")
            options[option] = flags_[option].value
        from transformer_jax.evaluation import restore
        from transformer_jax.exports import mapping

        workdir = flags_["workdir"].value
        mapping.check_new(out)  # an unfit --out is refused before the workdir is read
        run = restore.WorkdirSpec.from_config(resume.workdir_config(workdir))
        exports.export(name, workdir, run, out, flags_["average"].value, **options)


if __name__ == "__main__":
    from absl import flags

    from transformer_jax.exports.ctranslate2 import QUANTIZATIONS

    cli.run(functools.partial(main, flags_={
        "workdir": cli.define_workdir_flag(required=False),
        "out": cli.define_path_flag("out", "The new directory to write."),
        "average": flags.DEFINE_integer(
            "average", None, "Average the parameters of the last N checkpoints; 1: the latest "
            "alone. Default: as the run's config says (as evaluate and translate).",
            lower_bound=1),
        "quantization": flags.DEFINE_enum(
            "quantization", None, QUANTIZATIONS, "ctranslate2: quantize the weights."),
        "from_hf": cli.define_path_flag(
            "from_hf", "hf: read this MarianMT directory into the new workdir --out.",
            required=False),
    }))
