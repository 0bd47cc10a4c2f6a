"""What a sweep records: ``ROOT/sweep.json`` (the sweep and its points, for ``python -m
transformer_jax.compare ROOT``) and each point's ``ROOT/NAME/sweep_point.json`` (the sweep's
name, the point, its swept values and seeds, the launcher, and one entry per attempt: start,
command, wall and CPU seconds, exit status or scheduler job id, machine)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.errors import UserError
from transformer_jax.io import layout, storage, workdirs
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Point, Sweep


def header(sweep: Sweep, point: Point, launcher: str) -> dict[str, Any]:
    """The head of a point's sweep_point.json: the sweep, the point and the launcher that
    last started it."""
    return {"sweep": sweep.name, "point": point.name, "variant": point.variant,
            "value": point.value, "launcher": launcher}


def point_record(sweep: Sweep, point: Point, config: ml_collections.ConfigDict
                 ) -> dict[str, Any]:
    """What the sweep says of a point, in sweep.json and the point's sweep_point.json: its
    name, setting, variant, swept values and seeds."""
    return {"name": point.name, "setting": point.setting, "variant": point.variant,
            "value": point.value, "fields": point.fields,
            "seeds": {f: config_lib.get_field(config, f) for f in config_lib.SEED_FIELDS}}


def definition(sweep: Sweep, points: Sequence[Point], configs: dict[str, Any], scale: str,
               experiment: str) -> dict[str, Any]:
    """The sweep as recorded in ROOT/sweep.json."""
    return {"name": sweep.name, "experiment": experiment, "config": sweep.config,
            "parameter": sweep.axis(), "swept": hyper.varying(sweep.grid), "scale": scale,
            "description": sweep.description,
            "points": [{**point_record(sweep, p, configs[p.name][0]),
                        "config": configs[p.name][0].to_dict()} for p in points]}


def check_root(root: storage.Path, definition: dict[str, Any]) -> None:
    """A root holds one sweep at one scale: UserError when it holds another."""
    old = workdirs.read_json(root / layout.SWEEP)
    if old and (old.get("name"), old.get("scale")) != (definition["name"],
                                                       definition["scale"]):
        raise UserError(f"{root} holds the sweep {old.get('name')} at scale {old.get('scale')}"
                        f"; run {definition['name']} at scale {definition['scale']} under "
                        "another --root")


def read_point(workdir: storage.PathLike) -> dict[str, Any]:
    """The point's sweep_point.json ({} when there is none)."""
    record = workdirs.read_json(storage.path(workdir) / layout.SWEEP_POINT)
    return record if isinstance(record, dict) else {}


def record_point(workdir: storage.PathLike, header: dict[str, Any],
                 attempt: dict[str, Any] | None = None) -> None:
    """Updates ``workdir/sweep_point.json`` with ``header`` (the sweep's name, the point, its
    swept values and seeds) and adds ``attempt`` if given; written whole or not at all."""
    workdir = storage.path(workdir)
    path = workdir / layout.SWEEP_POINT
    record = read_point(workdir)
    record.update(header)
    record.setdefault("attempts", [])
    if attempt is not None:
        record["attempts"].append(attempt)
    workdir.mkdir(parents=True, exist_ok=True)
    storage.write_atomically(path, json.dumps(record, indent=2))


def record_attempt(workdir: storage.PathLike, header: dict[str, Any],
                   attempt: dict[str, Any]) -> None:
    """Adds an attempt to ``workdir/sweep_point.json``."""
    record_point(workdir, header, attempt)
