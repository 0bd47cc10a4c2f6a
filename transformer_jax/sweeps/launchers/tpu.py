"""``--launcher=tpu``: ``launch/tpu_pod.sh`` for each point in turn, on the pod slice named by
the environment (``TPU``, ``ZONE``); the workdirs are on the workers' storage."""

from transformer_jax.sweeps.launchers import RUNS, Launcher


class Tpu(Launcher):
    help = "launch/tpu_pod.sh each point, one after another (TPU and ZONE set)"
    mode = RUNS

    def command(self, sweep, point, args, python="python"):
        config, workdir, overrides = args
        return ["launch/tpu_pod.sh", config, workdir, *overrides]


LAUNCHER = Tpu()
