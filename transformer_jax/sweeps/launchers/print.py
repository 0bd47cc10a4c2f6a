"""``--launcher=print``: the commands as a shell script on stdout, to run anywhere."""

from transformer_jax.sweeps.launchers import WRITES, Launcher


class Print(Launcher):
    help = "write the commands to stdout as a shell script, starting nothing"
    mode = WRITES

    def write(self, line: str) -> None:
        print(line, flush=True)


LAUNCHER = Print()
