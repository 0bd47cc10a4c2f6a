"""``--launcher=local``: every point runs here, ``--parallel=K`` at once."""

from transformer_jax.sweeps.launchers import RUNS, Launcher


class Local(Launcher):
    help = "run the points here, --parallel=K at once, each one's output in WORKDIR/train.log"
    mode = RUNS
    parallel = True
    trains_here = True


LAUNCHER = Local()
