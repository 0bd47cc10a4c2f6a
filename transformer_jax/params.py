"""Print a config's parameter count and training FLOPs per target token, allocating no weight.

    python -m transformer_jax.params --config=configs/table3.py:C_N2

The library is :mod:`transformer_jax.model.counts`.
"""

from __future__ import annotations

import functools
from typing import Any

from transformer_jax import cli


def main(argv: list[str], config_flag: Any) -> None:
    """Prints the parameter count and training FLOPs per target token of a config."""
    from transformer_jax import config as config_lib
    from transformer_jax.model import counts
    from transformer_jax.model.spec import TransformerConfig

    cli.no_extra_args(argv)
    with cli.clean_errors():
        config = config_lib.validate(cli.flag_config(config_flag))
        model_config = TransformerConfig.from_config(config.model, config.data.vocab_size)
        length = config.data.row_len or config.data.max_len
        print(f"params: {counts.num_params(model_config)}")
        print(f"flops_per_target_token: {counts.train_flops_per_token(model_config, length)}")


if __name__ == "__main__":
    cli.run(functools.partial(main, config_flag=cli.define_config_flag()))
