"""A results folder's records: every run of a report kept compactly beside its tables, so
that ``python -m transformer_jax.compare FOLDER`` recomputes every table from the folder
alone, without the runs' workdirs.

``FOLDER/records/`` holds ``sweep.json`` (the sweep's definition, as its root's) and one
``<point>.npz`` a run: the run's sentence statistics
(:mod:`transformer_jax.evaluation.sentence_stats`: test BLEU and chrF, validation NLL,
sentence by sentence) and, under the key ``row``, the run's row of the report as JSON (its
config's Table 3 fields, status, steps, times, figures, curve, attempts and provenance).

``compare ROOT --out=FOLDER`` writes them; where FOLDER already holds records, the runs of
ROOT are combined with them (a run of ROOT replaces the record of the same point unless the
record finished and the run did not): a sweep extended with more ``--seeds`` reports its
new seeds with the old ones even where the old workdirs are gone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from transformer_jax.errors import UserError
from transformer_jax.evaluation import sentence_stats
from transformer_jax.io import layout, storage

RECORDS = "records"
DEFINITION = layout.SWEEP  # the sweep's record, as a sweep root holds it
ROW = "row"
# Row fields not kept: the translations (their statistics are) and the arrays themselves.
NOT_KEPT = ("translations", "sentence_stats")


def holds_records(folder: storage.PathLike) -> bool:
    return (storage.path(folder) / RECORDS / DEFINITION).is_file()


def _file(folder: storage.Path, point: str) -> storage.Path:
    if "/" in point or point.startswith("."):
        raise UserError(f"point name {point!r} cannot name a record file")
    return folder / RECORDS / f"{point}.npz"


def _plain(value: Any) -> Any:
    """JSON's view of a row's value (tuples as lists), for comparing a record with a row."""
    return json.loads(json.dumps(value))


def write(folder: storage.PathLike, definition: dict[str, Any],
          rows: Sequence[dict[str, Any]]) -> list[storage.Path]:
    """The records of ``rows`` (and the definition) in ``folder``; a record already there
    with the same content is left alone (a rewritten .npz differs by its timestamps).
    Returns the files written."""
    folder = storage.path(folder)
    (folder / RECORDS).mkdir(parents=True, exist_ok=True)
    written = []
    target = folder / RECORDS / DEFINITION
    text = json.dumps(definition, indent=1, sort_keys=True) + "\n"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        storage.write_atomically(target, text)
        written.append(target)
    for row in rows:
        target = _file(folder, row["point"])
        kept = _plain({k: v for k, v in row.items() if k not in NOT_KEPT})
        # An attempt's command names the interpreter of the machine it ran on: not kept.
        kept["attempts"] = [{k: v for k, v in a.items() if k != "command"}
                            for a in kept.get("attempts") or [] if isinstance(a, dict)]
        arrays = dict(row.get("sentence_stats") or {})
        if target.is_file():
            try:
                old = read_one(target)
            except UserError:
                old = None
            if old is not None and old[0] == kept and _same(old[1], arrays):
                continue
        # The row's keys in their order: the report shows some of them as they come.
        data = sentence_stats.dumps({**arrays, ROW: np.array(json.dumps(kept))})
        storage.write_atomically(target, data)
        written.append(target)
    return written


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def read_one(path: storage.Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(row, sentence statistics) of one record; UserError naming the file when damaged."""
    try:
        arrays = sentence_stats.loads(path.read_bytes())
        row = json.loads(str(arrays.pop(ROW)))
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{path}: not a run's record ({e})") from e
    problem = sentence_stats.check(arrays)
    if problem or not isinstance(row, dict) or not isinstance(row.get("point"), str):
        raise UserError(f"{path}: not a run's record ({problem or 'no row'})")
    return row, arrays


def read(folder: storage.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the sweep's definition, its rows with their sentence statistics), in the
    definition's order of points, from a folder's records."""
    folder = storage.path(folder)
    target = folder / RECORDS / DEFINITION
    try:
        definition = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{target}: not a sweep's definition ({e})") from e
    if not isinstance(definition, dict):
        raise UserError(f"{target}: not a sweep's definition (not an object)")
    rows = {}
    for path in sorted((folder / RECORDS).glob("*.npz")):
        row, arrays = read_one(path)
        rows[row["point"]] = {**row, "sentence_stats": arrays or None, "translations": None}
    order = [p["name"] for p in definition.get("points", []) if isinstance(p, dict)]
    ranked = sorted(rows, key=lambda name: (order.index(name) if name in order
                                            else len(order), name))
    return definition, [rows[name] for name in ranked]


def combine(definition: dict[str, Any], rows: Sequence[dict[str, Any]],
            kept_definition: dict[str, Any], kept: Sequence[dict[str, Any]]
            ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A sweep root's rows with the records a folder kept: a point of the root replaces the
    kept one unless only the kept one finished; kept points the root lacks (their
    workdirs gone) are added, and the definition's points with them."""
    mine = {r["point"]: r for r in rows}
    for old in kept:
        new = mine.get(old["point"])
        if new is None or (old["kind"] == "finished" and new["kind"] != "finished"):
            mine[old["point"]] = old
    names = [p["name"] for p in definition.get("points", [])]
    extra = [p for p in kept_definition.get("points", [])
             if isinstance(p, dict) and p.get("name") in mine and p.get("name") not in names]
    definition = {**definition, "points": [*definition.get("points", []), *extra]}
    order = [p["name"] for p in definition["points"]]
    ranked = sorted(mine, key=lambda n: (order.index(n) if n in order else len(order), n))
    return definition, [mine[n] for n in ranked]


def finished_points(folder: storage.PathLike) -> set[str]:
    """The points whose finished runs a results folder keeps records of (none where the
    folder keeps no records)."""
    if not holds_records(folder):
        raise UserError(f"{folder}: holds no {RECORDS}/{DEFINITION}; give a results folder "
                        "written by python -m transformer_jax.compare ROOT --out=FOLDER")
    return {r["point"] for r in read(folder)[1] if r.get("kind") == "finished"}
