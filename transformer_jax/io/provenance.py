"""What produced a run: the code, the command, the libraries and the machine.

Every start of a training run (the first and each resumption) appends one entry to
``<workdir>/provenance.json``, beside ``config.json``:

* ``code``: the commit of the project's checkout, whether its tree had uncommitted changes
  (``dirty``), or ``"unknown"`` for an installed copy without git;
* ``command``: the command line; ``started``: the local time; ``host``; ``resumed_at_step``;
* ``versions``: Python, jax, jaxlib, flax, optax, orbax-checkpoint and the accelerator
  runtime (the backend's platform version, e.g. the CUDA or TPU runtime);
* ``devices``: their kind, the local and global counts; ``processes``.

``python -m transformer_jax.compare`` reads it to show where the points of one sweep were
trained with different code or versions (:func:`fingerprint`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from transformer_jax.io import layout, storage, strict_json, workdirs

PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint")
_REPO = Path(__file__).resolve().parents[2]


@functools.cache
def code() -> dict[str, Any]:
    """The project's commit and whether its checkout has uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}
    return {"commit": commit, "dirty": dirty}


def versions() -> dict[str, str]:
    """Python's and the libraries' versions, and the accelerator runtime's."""
    out = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = "not installed"
    try:
        import jax

        out["runtime"] = f"{jax.default_backend()} {jax.devices()[0].client.platform_version}"
    except (RuntimeError, AttributeError, IndexError):
        out["runtime"] = "unknown"
    return out


def entry(step: int = 0) -> dict[str, Any]:
    """This process's provenance entry; ``step`` is the step it resumes at (0: a new run)."""
    import jax

    devices = jax.devices()
    return {
        "started": workdirs.now(), "host": socket.gethostname(),
        "command": shlex.join([sys.executable, *sys.argv]), "resumed_at_step": step,
        **code(), "versions": versions(),
        "devices": {"kind": devices[0].device_kind, "platform": devices[0].platform,
                    "local": jax.local_device_count(), "global": len(devices)},
        "processes": jax.process_count(), "machine": workdirs.machine(),
    }


def record(workdir: storage.PathLike, step: int = 0) -> dict[str, Any]:
    """Appends this start's entry to ``<workdir>/provenance.json``; returns it. A file that
    reads with anything left out (damaged, edited) is first set aside, kept whole."""
    path = storage.path(workdir) / layout.PROVENANCE
    runs, whole = _entries(path)
    if not whole:
        strict_json.set_aside(path)
    new = entry(step)
    storage.write_atomically(path, json.dumps({"runs": [*runs, new]}, indent=2))
    return new


def read(workdir: storage.PathLike) -> list[dict[str, Any]]:
    """The workdir's entries, oldest first ([] when there are none). Entries that are not
    what :func:`entry` writes (an edited or damaged file: not an object, a commit that is not
    a string, versions that are not strings) are left out with a warning naming the file."""
    return _entries(storage.path(workdir) / layout.PROVENANCE)[0]


def _entries(path: storage.Path) -> tuple[list[dict[str, Any]], bool]:
    """(the good entries of ``path``, whether the file held nothing else)."""
    data = workdirs.read_object(path)
    if data is None:
        return [], not path.exists()
    runs = data.get("runs", [])
    runs = runs if isinstance(runs, list) else [runs]
    good = [r for r in runs if isinstance(r, dict)
            and isinstance(r.get("commit", ""), str)
            and isinstance(r.get("versions", {}), dict)
            and all(isinstance(v, str) for v in r.get("versions", {}).values())]
    if len(good) < len(runs):
        strict_json.warn(f"{path}: left out {len(runs) - len(good)} "
                         f"entr{'y' if len(runs) - len(good) == 1 else 'ies'} not of the form a "
                         "run writes")
    return good, len(good) == len(runs) and set(data) <= {"runs"}


def fingerprint(run: dict[str, Any]) -> dict[str, Any]:
    """What must agree between runs that are compared: the code and the versions (the
    devices are reported beside, since speed but not results may depend on them)."""
    commit = run.get("commit", "unknown")
    return {"code": commit[:12] + ("+uncommitted" if run.get("dirty") else ""),
            **{k: v for k, v in run.get("versions", {}).items() if k != "python"}}
