"""Train and evaluate a Transformer: the command-line entry point.

    python -m transformer_jax.main --config=configs/base.py --workdir=runs/base \
        [--config.train.num_steps=1000 ...]

Re-running the same command resumes from the latest checkpoint in the workdir.
"""

from __future__ import annotations

import functools
from typing import Any

from transformer_jax import cli


def main(argv: list[str], config_flag: Any, workdir_flag: Any) -> None:
    cli.no_extra_args(argv)
    cli.setup_logging()
    with cli.clean_errors():
        from transformer_jax import train

        train.train_and_evaluate(config_flag.value, workdir_flag.value)


if __name__ == "__main__":
    cli.run(functools.partial(main, config_flag=cli.define_config_flag(),
                              workdir_flag=cli.define_workdir_flag()))
