"""Checks a sweep and a search both make before anything starts: the launcher's flags, and a
workdir trained with another model."""

from __future__ import annotations

import json

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import UserError
from transformer_jax.io import layout, storage, workdirs
from transformer_jax.sweeps import launchers
from transformer_jax.sweeps.points import PointSpec


def check_workdir_model(workdir: storage.Path, spec: PointSpec, label: str) -> None:
    """A workdir trained with another model or data cannot resume this point; one whose
    config.json is damaged is named (workdirs.read_config's UserError)."""
    if not (workdir / layout.CHECKPOINTS).exists():
        return
    try:
        saved = workdirs.read_config(workdir)
    except UserError as e:
        raise UserError(f"point {label}: {e}") from None
    if saved is None:
        return
    conflicts = resume.resume_conflicts(saved, json.loads(spec.fixed))
    if conflicts:
        raise UserError(f"point {label}: {workdir}/config.json differs from the sweep's "
                        f"config: {'; '.join(conflicts)}; use another --root or remove the "
                        "workdir")


def check_flags(launcher: str, scale: str, parallel: int) -> launchers.Launcher:
    """The launcher called ``launcher``; UserError for a scale or --parallel it cannot take."""
    chosen = launchers.get(launcher)
    chosen.check()
    if scale not in config_lib.SCALES:
        raise UserError(f"--scale={scale} is not one of {', '.join(config_lib.SCALES)}")
    if parallel < 1:
        raise UserError(f"--parallel={parallel} must be >= 1")
    if chosen.mode == launchers.RUNS and parallel > 1 and not chosen.parallel:
        raise UserError(f"--launcher={launcher} runs one point at a time; use --parallel=1")
    return chosen
