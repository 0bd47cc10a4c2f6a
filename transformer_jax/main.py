"""Train and evaluate a Transformer: the command-line entry point.

    python -m transformer_jax.main --config=configs/base.py --workdir=runs/base \
        [--config.train.num_steps=1000 ...]

Re-running the same command resumes from the latest checkpoint in the workdir. Multi-host
runs start one process per host with the same command; the processes find each other from
--coordinator_address/--num_processes/--process_id, or from the environment (SLURM, Open
MPI, Cloud TPU), see launch/. When one process of such a run dies, the others end within
seconds (exit status 5, errors.FAILED_PROCESS_EXIT_STATUS); starting every process again
resumes from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import traceback
from collections.abc import Iterator
from typing import Any

from absl import flags

from transformer_jax import cli

_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", "", "host:port of process 0, for a multi-process run.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 0, "Processes in a multi-process run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", -1, "This process's index, 0-based.")
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_s", 100, "Multi-process runs: a process silent this long is declared "
    "dead and the run ends (JAX's default, 100 s).", lower_bound=1,
    upper_bound=2**31 - 1)  # the coordination service's int32


@contextlib.contextmanager
def end_promptly_on_failure() -> Iterator[None]:
    """In a multi-process run, ends this process at once when the run fails with anything
    but bad input (which every process meets alike, and cli reports): one line on stderr,
    after the traceback unless the failure is JAX's (a collective broken because another
    process was killed: "Connection reset by peer"), and exit status 5.

    Otherwise the process would wait at JAX's shutdown barrier for the dead one until the
    coordination service's heartbeat timeout (100 s), then abort with a C++ stack dump.

    A write of this process's that failed for want of space or stalled (DiskFull,
    WriteStalled) is not met by the others alike: they wait for this one in their next
    collective. It ends this process at once too, after its one line (exit status 2); the
    others' collectives then break and they end as above.
    """
    try:
        yield
    except Exception as e:
        import jax

        from transformer_jax.errors import DiskFull, WriteStalled, shown

        if jax.process_count() > 1 and isinstance(e, DiskFull | WriteStalled):
            print(f"error: {shown(str(e))}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(2)
        if jax.process_count() == 1 or isinstance(e, cli.USER_ERRORS):
            raise
        from transformer_jax.errors import FAILED_PROCESS_EXIT_STATUS

        if not isinstance(e, jax.errors.JaxRuntimeError):
            traceback.print_exc()
        first = next((line.strip() for line in str(e).splitlines() if line.strip()),
                     type(e).__name__)
        print(f"error: process {jax.process_index()} of {jax.process_count()}: the run failed "
              f"({first}); start every process again with the same command to resume from "
              "the last checkpoint", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(FAILED_PROCESS_EXIT_STATUS)  # no shutdown barrier: a peer may be gone


def main(argv: list[str], config_flag: Any, workdir_flag: Any) -> None:
    cli.no_extra_args(argv)
    with cli.clean_errors():
        from transformer_jax.training import parallel
        from transformer_jax.training.spec import TrainingSpec

        # The config is read once, into the run's specs; bad values are refused before
        # anything starts.
        spec = TrainingSpec.from_config(cli.flag_config(config_flag))
        parallel.initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value,
                                        _PROCESS_ID.value, _HEARTBEAT.value)
        from transformer_jax.training import train

        with end_promptly_on_failure():
            train.train(spec, workdir_flag.value)


if __name__ == "__main__":
    cli.run(functools.partial(main, config_flag=cli.define_config_flag(),
                              workdir_flag=cli.define_workdir_flag()))
