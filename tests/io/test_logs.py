"""The log writers' import: tensorboardX without PyTorch."""

import os
import subprocess
import sys

from ..helpers import ROOT


def test_the_log_writers_import_without_pytorch_which_still_imports_after(tmp_path):
    # tensorboardX's writer imports torch whenever it is installed (3 CPU-s of every command's
    # start with PyTorch's build); io/logs.py keeps it out, and leaves torch importable. A
    # package named torch on the path stands for an installed PyTorch: whether its import runs
    # is the question, not what it holds.
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("IMPORTED_FROM = __file__\n")
    code = ("import sys, transformer_jax.io.logs as logs\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "writer = logs.summary\n"
            "import torch\n"
            "print(torch.IMPORTED_FROM)\n")
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == str(tmp_path / "torch" / "__init__.py")
