"""A results folder's records/ rebuilt from its results.csv, for sweeps whose workdirs are
gone, so that ``python -m transformer_jax.compare FOLDER`` judges them with today's
statistics (transformer_jax/evaluation/significance.py).

    python -m experiments.records_from_csv experiments/results/table3_demo \
        [--name=NAME] [--description=TEXT] [--parameter=FIELD] [--scale=SCALE]

The sweep's name, description, swept parameter and scale are read from the heading of the
folder's results.md unless given as flags. Writes ``FOLDER/records/``
(transformer_jax/sweeps/report/archive.py): ``sweep.json`` with the sweep's points (name,
setting, variant, value) and one ``<point>.npz`` a run holding only the run's report row,
its fields typed as the report types them (integers, floats, None for an empty cell).

What a results.csv does not hold is not made up: such a run has no sentence statistics, so
compare judges it between runs only (the test set's share of the variance is unknown), and
no loss curve (compare draws none); its one attempt spans the run's recorded wall and CPU
time from its first start, so the sweep's end-to-end time and CPU-minutes are as before.
Its code is the commit results.csv names, without the library versions.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from absl import flags

from transformer_jax import cli
from transformer_jax.errors import UserError
from transformer_jax.sweeps import status
from transformer_jax.sweeps.report import archive, build, metrics

# How a cell of results.csv is read back: "int" a whole number, "number" an int or a float
# as written (Python's csv writes a float with its point), "value" a number where it reads
# back as written, else text; any other column is text. An empty cell is None.
INTS = ("seed", "N", "d_model", "d_ff", "h", "d_k", "d_v", "params", "steps", "num_steps",
        "bleu_sentences")
FIGURES = tuple(m.name for m in metrics.ordered())  # the report's, in their columns' order
NUMBERS = ("P_drop", "eps_ls", "wall_s", "cpu_s", *FIGURES, "paper_ppl", "paper_bleu",
           "paper_params_m")
TEXTS = ("point", "setting", "variant", "status", "scale", "code", "machine", "started")
CONFIG = tuple(c for c, _, _ in build.CONFIG_COLUMNS)
KINDS = (*status.DONE, "unfinished", "failed", "queued", "missing")


def _number(text: str) -> int | float:
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)


def _value(text: str) -> Any:
    """A swept value: the number that prints as ``text``, else ``text`` itself."""
    try:
        number = _number(text)
    except ValueError:
        return text
    return number if str(number) == text else text


def _cell(column: str, text: str, where: str) -> Any:
    if text == "" and column not in TEXTS:
        return None
    try:
        if column in INTS:
            return int(text)
        if column in NUMBERS:
            return _number(text)
    except ValueError:
        kind = "a whole number" if column in INTS else "a number"
        raise UserError(f"{where}: {column}={text[:40]!r} is not {kind}") from None
    return _value(text) if column == "value" else text


def row(cells: dict[str, str], where: str) -> dict[str, Any]:
    """The report row (the keys and types of transformer_jax/sweeps/report/build.py's ``_row``)
    of one line of results.csv."""
    c = {k: _cell(k, v, where) for k, v in cells.items()}
    kind = c["status"].split(" (")[0]
    if kind not in KINDS:
        raise UserError(f"{where}: status={c['status'][:40]!r} is not one of "
                        + ", ".join(KINDS))
    if c["wall_s"] is not None and c["cpu_s"] is not None and not c["started"]:
        raise UserError(f"{where}: wall_s and cpu_s without started")
    attempts = [] if c["wall_s"] is None or c["cpu_s"] is None else [
        {"started": c["started"], "wall_s": c["wall_s"], "cpu_s": c["cpu_s"],
         "machine": c["machine"]}]
    codes = [code for code in c["code"].split(", ") if code]
    config = {k: c[k] for k in CONFIG} if any(c[k] is not None for k in CONFIG) else {}
    return {
        **{k: c[k] for k in ("point", "setting", "seed", "variant", "value", "status")},
        "kind": kind,
        **{k: c[k] for k in ("params", "steps", "num_steps", "wall_s", "cpu_s",
                             *FIGURES, "bleu_sentences", "paper_ppl",
                             "paper_bleu", "paper_params_m", "scale")},
        **config,
        "machine": c["machine"], "started": c["started"], "attempts": attempts,
        "curve": [],  # results.csv holds no training curve
        "provenance": [{"code": code} for code in codes],
        "code": c["code"],
        "translations": None,
        "sentence_stats": None,
    }


def read_csv(path: Path) -> list[dict[str, Any]]:
    """The rows of a results.csv; UserError naming the file, line and column of what is
    not one."""
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [k for k in build.columns() if k not in (reader.fieldnames or [])]
            if missing:
                raise UserError(f"{path}: no column {', '.join(missing)} (the header of "
                                "python -m transformer_jax.compare's results.csv)")
            rows, seen = [], set()
            for cells in reader:
                where = f"{path} line {reader.line_num}"
                if None in cells or None in cells.values():
                    raise UserError(f"{where}: not as many cells as the header's "
                                    f"{len(reader.fieldnames)}")
                r = row({k: cells[k] for k in build.columns()}, where)
                if r["point"] in seen:
                    raise UserError(f"{where}: point {r['point']!r} twice")
                seen.add(r["point"])
                rows.append(r)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except csv.Error as e:
        raise UserError(f"{path}: not CSV ({e})") from None
    if not rows:
        raise UserError(f"{path}: no runs")
    return rows


def heading(path: Path) -> dict[str, str]:
    """name, description, parameter and scale as results.md's heading states them (a key
    it does not state is left out)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    out = {}
    if lines and lines[0].startswith("# "):
        out["name"] = lines[0][2:].strip()
    if len(lines) > 2 and lines[2] and not lines[2].startswith("scale: "):
        out["description"] = lines[2].removesuffix(".")
    for line in lines:
        if line.startswith("scale: "):
            scale = line.split(";")[0].removeprefix("scale: ").removesuffix(".")
            out["scale"] = "" if scale == "as configured" else scale
        if line.startswith("| setting | "):  # the Settings table: the parameter comes next
            out.setdefault("parameter", line.split(" | ")[1])
    return out


def convert(folder: Path, given: dict[str, str | None]) -> list[Path]:
    """Writes FOLDER/records/ from FOLDER/results.csv; returns the files written."""
    if not folder.is_dir():
        raise UserError(f"{folder}: no such directory")
    rows = read_csv(folder / "results.csv")
    stated = {**heading(folder / "results.md"),
              **{k: v for k, v in given.items() if v is not None}}
    for key in ("name", "parameter"):
        if not stated.get(key):
            raise UserError(f"{folder / 'results.md'} does not state the sweep's {key}: "
                            f"give --{key}")
    definition = {"name": stated["name"], "parameter": stated["parameter"],
                  "scale": stated.get("scale", ""),
                  "description": stated.get("description", ""),
                  "points": [{"name": r["point"], "setting": r["setting"],
                              "variant": r["variant"], "value": r["value"]} for r in rows]}
    return archive.write(folder, definition, rows)


def main(argv: Sequence[str], fields: dict[str, Any]) -> None:
    with cli.clean_errors():
        if len(argv) != 2:
            raise UserError("give one results folder, e.g. python -m "
                            "experiments.records_from_csv experiments/results/table3_demo")
        written = convert(Path(argv[1]), {k: f.value for k, f in fields.items()})
        print(f"wrote {len(written)} files to {Path(argv[1]) / archive.RECORDS}")


if __name__ == "__main__":
    cli.run(functools.partial(main, fields={
        "name": flags.DEFINE_string("name", None, "The sweep's name (default: results.md's "
                                    "heading)."),
        "description": flags.DEFINE_string("description", None, "The sweep's description "
                                           "(default: the line under results.md's heading)."),
        "parameter": flags.DEFINE_string("parameter", None, "The swept field (default: the "
                                         "second column of results.md's Settings table)."),
        "scale": flags.DEFINE_string("scale", None, "The scale (default: results.md's).")}))
