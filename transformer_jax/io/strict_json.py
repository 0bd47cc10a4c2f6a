"""The one reader of every JSON record the project reads back: a workdir's config.json,
config_changes.jsonl, metrics.jsonl, final_metrics.json, provenance.json, hold.json and
sweep_point.json, a sweep's sweep.json, a data folder's row_len.json, a token cache's
header, a lock's record, a MarianMT directory's config files and the attention benchmark's
results.

A record is read by the same rules wherever it is: valid UTF-8 JSON, no NaN or Infinity
unless the record allows them (``nan=True``: a diverged loss in metrics.jsonl), no number
that overflows a float, no key given twice (JSON would keep the last and lose the first
without a word), integers of at most MAX_INT_DIGITS digits (Python refuses more than
4,300 with an error of its own, and no count or seed needs more than 20), nested at most
as deep as the parser goes, and of the expected top-level type (an object unless told
otherwise). A record that breaks one is :class:`Damaged`, a UserError of one line naming
the file, the line for JSON Lines, and the rule.

Who reads decides what a damaged record means: a config is refused, a file that only
describes a run is read as missing with a warning (:func:`read_or_none`, :func:`warn`), a
line of a log is left out with a warning naming its line.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from typing import Any

from transformer_jax.errors import UserError, shown
from transformer_jax.io import storage

# Digits an integer may have: 2**64 has 20; Python's own limit is 4,300.
MAX_INT_DIGITS = 40
# What a token looks like where a record was cut: part of a number or of a constant.
_PARTIAL_TOKEN = re.compile(r"-?[0-9.eE+-]*$")
_CONSTANTS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_TYPES = {dict: "an object", list: "a list", str: "a string", int: "an integer",
          float: "a number", bool: "true or false", type(None): "null"}


class Damaged(UserError):
    """A JSON record that breaks the rules; the message names the file (and line).
    ``cut_short``: the text ends before the record does, as a writer killed in the middle
    leaves it."""

    def __init__(self, message: str, cut_short: bool = False):
        super().__init__(message)
        self.cut_short = cut_short


class _Refused(ValueError):
    """Raised inside the parser's hooks; becomes a Damaged naming the file."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"the key {shown(key)[:40]!r} is given twice")
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-')):,} digits (at most "
                       f"{MAX_INT_DIGITS})")
    return int(text)


def _float_hook(nan: bool) -> Any:
    def parse(text: str) -> float:
        value = float(text)
        if not nan and math.isinf(value):
            raise _Refused(f"{text[:40]} overflows a float")
        return value
    return parse


def _constant_hook(nan: bool) -> Any:
    def parse(name: str) -> float:
        if not nan:
            raise _Refused(f"{name} is not a number this file holds")
        return float(name)
    return parse


def _ran_out(text: str, e: json.JSONDecodeError) -> bool:
    """Whether the parse failed only because ``text`` ends early: what a writer killed in
    the middle of a record leaves."""
    rest = text[e.pos:].rstrip()
    if e.msg.startswith("Unterminated string") or not rest:
        return True
    if e.msg.startswith("Invalid \\uXXXX escape"):  # cut inside the escape
        return len(rest) < 6
    return bool(_PARTIAL_TOKEN.fullmatch(rest)) or any(
        c.startswith(rest) and c != rest for c in _CONSTANTS)


def describe(value: Any) -> str:
    """A JSON value's type in words: "an object", "a list", "a string"..."""
    return _TYPES.get(type(value), type(value).__name__)


def loads(data: bytes | str, where: str, *, nan: bool = False,
          top: type | tuple[type, ...] = dict, line: bool = False) -> Any:
    """The record in ``data``, read by the rules of this module; Damaged naming ``where``
    (the file, or "FILE line N" with ``line``: a line of JSON Lines) for a record that
    breaks one. ``top`` is the type (or types) the record must be; ``nan`` allows NaN and
    the infinities."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Damaged(f"{where}: not UTF-8 (byte 0x{data[e.start]:02x} at byte "
                          f"{e.start + 1:,})", cut_short=e.reason == "unexpected end of data"
                          and e.end == len(data)) from None
    else:
        text = data
    text = text.removeprefix("\ufeff")
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_int,
                           parse_float=_float_hook(nan), parse_constant=_constant_hook(nan))
    except _Refused as e:
        raise Damaged(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        if not text.strip():
            raise Damaged(f"{where}: empty, not JSON") from None
        at = f"column {e.colno:,}" if line else f"line {e.lineno:,}, column {e.colno:,}"
        if _ran_out(text, e):
            raise Damaged(f"{where}: cut short ({e.msg} at {at})", cut_short=True) from None
        raise Damaged(f"{where}: not JSON ({e.msg} at {at})") from None
    except RecursionError:
        raise Damaged(f"{where}: not JSON (nested too deep)") from None
    wanted = top if isinstance(top, tuple) else (top,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        raise Damaged(f"{where}: {describe(value)}, not "
                      f"{' or '.join(_TYPES.get(t, t.__name__) for t in wanted)}")
    return value


def read(path: storage.PathLike, *, nan: bool = False,
         top: type | tuple[type, ...] = dict, missing: Any = None) -> Any:
    """The record in the file ``path`` (``missing`` when there is none); Damaged naming the
    file for one that breaks the rules or is not a regular file (a named pipe would be
    waited on)."""
    why = storage.not_a_file(path)
    if why == "no such file":
        return missing
    if why:
        raise Damaged(f"{path}: {why}, not a JSON file")
    try:
        data = storage.path(path).read_bytes()
    except FileNotFoundError:  # removed meanwhile
        return missing
    except OSError as e:
        raise Damaged(f"{path}: unreadable ({e.strerror or type(e).__name__})") from None
    return loads(data, str(path), nan=nan, top=top)


_warned: set[str] = set()


def warn(message: str) -> None:
    """Logs ``warning: message`` once in this process (a file read again and again, by a
    sweep's status or its controller, says it once)."""
    if message not in _warned:
        if len(_warned) > 10_000:
            _warned.clear()
        _warned.add(message)
        logging.warning("warning: %s", message)


def read_or_none(path: storage.PathLike, *, nan: bool = False,
                 top: type | tuple[type, ...] = dict) -> Any:
    """:func:`read`, but a damaged record is None with a warning naming the file and the
    damage (:func:`warn`): for the files that only describe a run."""
    try:
        return read(path, nan=nan, top=top)
    except Damaged as e:
        warn(f"{e}; read as missing")
        return None


def read_lines(path: storage.PathLike, *, nan: bool = False,
               top: type | tuple[type, ...] = dict) -> Iterator[tuple[int, Any]]:
    """(line number from 1, record or Damaged) for each line of the JSON Lines file
    ``path`` that is not blank (none when there is no file; Damaged naming the file when it
    is not a regular file)."""
    why = storage.not_a_file(path)
    if why == "no such file":
        return
    if why:
        raise Damaged(f"{path}: {why}, not a JSON Lines file")
    data = storage.path(path).read_bytes()
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, loads(line, f"{path} line {number}", nan=nan, top=top, line=True)
        except Damaged as e:
            yield number, e


def set_aside(path: storage.PathLike) -> storage.Path:
    """Renames the record ``path``, damaged or holding what its reader leaves out, to
    ``<name>.damaged-<n>`` (the first n free) before it is written again, with a warning
    naming both: nothing is lost. Returns the new path."""
    p = storage.path(path)
    n = 1
    while p.with_name(f"{p.name}.damaged-{n}").exists():
        n += 1
    target = p.with_name(f"{p.name}.damaged-{n}")
    p.rename(target)
    warn(f"{p} held what its reader leaves out: kept as {target.name}, and written anew")
    return target
