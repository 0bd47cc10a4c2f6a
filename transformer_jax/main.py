"""Train and evaluate a Transformer: the command-line entry point.

    python -m transformer_jax.main --config=configs/base.py --workdir=runs/base \
        [--config.train.num_steps=1000 ...]

Re-running the same command resumes from the latest checkpoint in the workdir. Multi-host
runs start one process per host with the same command; the processes find each other from
--coordinator_address/--num_processes/--process_id, or from the environment (SLURM, Open
MPI, Cloud TPU), see launch/.
"""

from __future__ import annotations

import functools
from typing import Any

from absl import flags

from transformer_jax import cli

_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", "", "host:port of process 0, for a multi-process run.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 0, "Processes in a multi-process run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", -1, "This process's index, 0-based.")


def main(argv: list[str], config_flag: Any, workdir_flag: Any) -> None:
    cli.no_extra_args(argv)
    with cli.clean_errors():
        from transformer_jax import config as config_lib
        from transformer_jax.training import parallel

        # Bad values are refused before anything starts.
        config = config_lib.validate(cli.flag_config(config_flag))
        parallel.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value,
                                        _PROCESS_ID.value)
        from transformer_jax.training import train

        train.train_and_evaluate(config, workdir_flag.value)


if __name__ == "__main__":
    cli.run(functools.partial(main, config_flag=cli.define_config_flag(),
                              workdir_flag=cli.define_workdir_flag()))
