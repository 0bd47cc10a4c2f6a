"""What a sweep records: ``ROOT/sweep.json`` (the sweep and its points, for ``python -m
transformer_jax.compare ROOT``) and each point's ``ROOT/NAME/sweep_point.json`` (the sweep's
name, the point, its swept values and seeds, the launcher, and one entry per attempt: start,
command, wall and CPU seconds, exit status or scheduler job id, machine)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.errors import UserError
from transformer_jax.io import layout, storage, strict_json, workdirs
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.points import PointSpec


def header(sweep: Sweep, point: Point, launcher: str) -> dict[str, Any]:
    """The head of a point's sweep_point.json: the sweep, the point and the launcher that
    last started it."""
    return {"sweep": sweep.name, "point": point.name, "variant": point.variant,
            "value": point.value, "launcher": launcher}


def point_record(sweep: Sweep, point: Point, seeds: Mapping[str, Any]) -> dict[str, Any]:
    """What the sweep says of a point, in sweep.json and the point's sweep_point.json: its
    name, setting, variant, swept values and ``seeds`` ({field: value})."""
    return {"name": point.name, "setting": point.setting, "variant": point.variant,
            "value": point.value, "fields": point.fields, "seeds": dict(seeds)}


def definition(sweep: Sweep, points: Sequence[Point], specs: Mapping[str, PointSpec],
               scale: str, experiment: str) -> dict[str, Any]:
    """The sweep as recorded in ROOT/sweep.json, each point with its config (``specs``:
    {point: its PointSpec})."""
    return {"name": sweep.name, "experiment": experiment, "config": sweep.config,
            "parameter": sweep.axis(), "swept": hyper.varying(sweep.grid), "scale": scale,
            "description": sweep.description,
            "points": [{**point_record(sweep, p, dict(specs[p.name].seeds)),
                        "config": json.loads(specs[p.name].record)} for p in points]}


def write_sweep(root: storage.PathLike, definition: dict[str, Any]) -> None:
    """Writes ``ROOT/sweep.json`` (:func:`definition`, and a search's record where there is
    one) whole or not at all: the one writer of the file, for a grid and a search alike."""
    storage.write_atomically(storage.path(root) / layout.SWEEP, json.dumps(definition, indent=2))


def read_sweep(root: storage.PathLike) -> dict[str, Any] | None:
    """``ROOT/sweep.json`` (None when there is none), checked as it is read: an object whose
    text fields are strings and whose points are objects named by one folder of the root
    each (no name climbs out of it), with a config of sections and seeds of integers.
    UserError naming the file and the field that is not so (a damaged or edited file)."""
    path = storage.path(root) / layout.SWEEP
    try:
        definition = strict_json.read(path)
    except strict_json.Damaged as e:
        raise UserError(f"{e}; move it away to report the runs of the folder") from None
    if definition is None:
        return None

    def refuse(field: str, value: Any, wanted: str) -> UserError:
        return UserError(f"{path}: {field}={str(value)[:60]!r} is not {wanted}")
    for field in ("name", "experiment", "config", "parameter", "scale", "description"):
        if not isinstance(definition.get(field, ""), str):
            raise refuse(field, definition[field], "a string")
    points = definition.get("points", [])
    if not isinstance(points, list):
        raise refuse("points", points, "a list")
    seen = set()
    for i, point in enumerate(points):
        where = f"points[{i}]"
        if not isinstance(point, dict):
            raise refuse(where, point, "an object")
        name = point.get("name")
        why = hyper.unfit_name(name)
        if why:
            raise UserError(f"{path}: {where}.name={str(name)[:60]!r} {why}")
        if name in seen:
            raise UserError(f"{path}: {where}.name={name!r} repeats")
        seen.add(name)
        for field in ("variant", "value"):
            if field not in point:
                raise UserError(f"{path}: {where} has no {field}")
        for field in ("variant", "setting"):
            if not isinstance(point.get(field, ""), str):
                raise refuse(f"{where}.{field}", point[field], "a string")
        if isinstance(point.get("value"), dict | list):
            raise refuse(f"{where}.value", point["value"], "a number or a string")
        seeds = point.get("seeds", {})
        if not isinstance(seeds, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in seeds.values()):
            raise refuse(f"{where}.seeds", seeds, "an object of integer seeds")
        config = point.get("config", {})
        if not isinstance(config, dict) or not all(
                isinstance(v, dict) for k, v in config.items() if k in CONFIG_SECTIONS):
            raise refuse(f"{where}.config", config, "a config of sections (model, data, ...)")
    return definition


# The sections of a config (config/defaults.py).
CONFIG_SECTIONS = tuple(k for k, v in config_lib.base_config().items()
                        if isinstance(v, ml_collections.ConfigDict))


def check_root(root: storage.Path, definition: dict[str, Any]) -> None:
    """A root holds one sweep at one scale: UserError when it holds another (or a damaged
    sweep.json)."""
    old = read_sweep(root)
    if old and (old.get("name"), old.get("scale")) != (definition["name"],
                                                       definition["scale"]):
        raise UserError(f"{root} holds the sweep {old.get('name')} at scale {old.get('scale')}"
                        f"; run {definition['name']} at scale {definition['scale']} under "
                        "another --root")


def read_point(workdir: storage.PathLike) -> dict[str, Any]:
    """The point's sweep_point.json ({} when there is none or it is damaged, with a warning;
    the next attempt writes it again, setting the damaged one aside), its attempts those
    that are objects and their times numbers (what is left out named in a warning)."""
    return _read_point(storage.path(workdir) / layout.SWEEP_POINT)[0]


def _read_point(path: storage.Path) -> tuple[dict[str, Any], bool]:
    """(the record of :func:`read_point`, whether the file held nothing it leaves out)."""
    raw = workdirs.read_object(path)
    if raw is None:
        return {}, not path.exists()
    record = json.loads(json.dumps(raw))  # a copy, compared with the file below
    if "attempts" in record:
        attempts = record["attempts"]
        attempts = [a for a in attempts if isinstance(a, dict)] \
            if isinstance(attempts, list) else []
        for a in attempts:  # times that are not numbers are not counted
            for key in ("wall_s", "cpu_s"):
                if key in a and (isinstance(a[key], bool) or not isinstance(a[key], int | float)):
                    del a[key]
        record["attempts"] = attempts
    whole = record == raw
    if not whole:
        strict_json.warn(f"{path}: left out attempts or times that are not what a sweep "
                         "writes")
    return record, whole


def record_point(workdir: storage.PathLike, header: dict[str, Any],
                 attempt: dict[str, Any] | None = None) -> None:
    """Updates ``workdir/sweep_point.json`` with ``header`` (the sweep's name, the point, its
    swept values and seeds) and adds ``attempt`` if given; written whole or not at all."""
    workdir = storage.path(workdir)
    path = workdir / layout.SWEEP_POINT
    record, whole = _read_point(path)
    if not whole:
        strict_json.set_aside(path)
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
