"""The log writers' import: tensorboardX without PyTorch."""

import importlib.util
import subprocess
import sys

from .. import needs
from ..helpers import ROOT


def test_the_log_writers_import_without_pytorch_which_still_imports_after():
    # tensorboardX's writer imports torch whenever it is installed (the hf extra's), 3 CPU-s
    # of every command's start; io/logs.py keeps it out, and leaves torch importable.
    if importlib.util.find_spec("torch") is None:
        needs.missing("torch is not installed (the hf extra: pip install -e '.[hf]')")
    code = ("import sys, transformer_jax.io.logs as logs\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "writer = logs.SummaryWriter\n"
            "import torch\n"
            "print(float(torch.ones(3).sum()))\n")
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "3.0"
