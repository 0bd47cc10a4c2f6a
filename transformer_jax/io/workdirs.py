"""What a training run's workdir says about it: its metrics, its last error and the settings
it was trained with. Which run holds it is :mod:`transformer_jax.io.holds`; where a sweep's
point stands and the sweep's record of it are :mod:`transformer_jax.sweeps.status` and
:mod:`transformer_jax.sweeps.records`.

A workdir holds ``config.json`` (the config the run started with), ``config_changes.jsonl``
(settings changed on resume, one JSON object per resume), ``metrics.jsonl`` (one JSON object
per logged step and split), ``final_metrics.json`` (written at the end: step, validation
loss, perplexity, test BLEU...), ``checkpoints/<step>/``, ``hold.json`` while a training run
holds it and, when a sweep ran it, ``sweep_point.json``: the sweep's name,
the point, and one entry per attempt (start, command, wall and CPU seconds, exit status or
a scheduler's job id, machine).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import pathlib
import platform
import re
from typing import Any

from transformer_jax.errors import UserError, shown
from transformer_jax.io import layout, metric_keys, storage


def read_json(path: storage.PathLike) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable (being written, not
    UTF-8, not JSON, nested too deep for the parser, or not a regular file)."""
    if storage.not_a_file(path):
        return None
    try:
        return json.loads(storage.path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None


def read_object(path: storage.PathLike) -> dict[str, Any] | None:
    """The JSON object in ``path``: None when it is missing or unreadable (:func:`read_json`)
    or holds anything but an object (a list, a number: a damaged file, with a warning)."""
    value = read_json(path)
    if value is not None and not isinstance(value, dict):
        logging.warning("warning: %s holds a JSON %s, not an object; read as missing", path,
                        type(value).__name__)
        return None
    return value


def last_logged_step(workdir: storage.PathLike) -> int | None:
    """The highest step in ``metrics.jsonl`` (None when nothing was logged)."""
    return max((r[metric_keys.STEP] for r in read_metric_records(workdir)), default=None)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_final(workdir: storage.PathLike) -> dict[str, Any]:
    """``final_metrics.json`` ({} when there is none or it cannot be read): the keys of
    metric_keys.FINAL_KEYS whose values have the type training writes (a step and counts are
    integers >= 0, figures numbers, signatures strings, the translations' files paths
    inside the workdir, STOPPED an object with its reason, step and message). A value of
    another type (a hand-edited or damaged file) is left out with a warning naming the file
    and the key, so that no reader acts on it. The one exception: the token count as a whole
    float, which is how runs before 2026-12-03 wrote it, is read as that integer."""
    path = storage.path(workdir) / layout.FINAL_METRICS
    final = read_object(path) or {}
    k = metric_keys
    tokens = final.get(k.TOKENS)
    if isinstance(tokens, float) and tokens.is_integer() and tokens >= 0:
        final[k.TOKENS] = int(tokens)
    counts = (k.STEP, k.TOKENS, k.BLEU_SENTENCES)
    strings = (k.BLEU_SIGNATURE, k.BLEU_TOKENIZED_SIGNATURE)
    files = (k.TEST_HYPOTHESES, k.TEST_REFERENCES)

    def fits(key: str, value: Any) -> bool:
        if key in counts:
            return _is_count(value)
        if key in strings:
            return isinstance(value, str)
        if key in files:  # relative, inside the workdir
            return isinstance(value, str) and bool(value) and not value.startswith(
                ("/", "\\")) and ".." not in value.replace("\\", "/").split("/") and \
                "\0" not in value
        if key == k.AVERAGED_STEPS:
            return isinstance(value, list) and all(_is_count(v) for v in value)
        if key == k.STOPPED:
            return isinstance(value, dict) and isinstance(value.get("reason"), str) and \
                _is_count(value.get(k.STEP, 0)) and isinstance(value.get("message", ""), str)
        return _is_number(value)

    bad = [key for key, value in final.items() if not fits(key, value)]
    if bad:
        logging.warning("warning: %s: left out %s, not of the type training writes", path,
                        ", ".join(f"{key}={str(final[key])[:40]!r}" for key in bad))
    return {key: value for key, value in final.items() if key not in bad}


def machine() -> str:
    """This machine in words: cores, CPU model and memory."""
    model = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = f", {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory = ""
    return f"{os.cpu_count()}-core {model}{memory}"


def last_train_record(workdir: storage.PathLike) -> dict[str, Any] | None:
    """The last training log line of ``metrics.jsonl`` (step, loss, tokens/s, steps/s...)."""
    train = read_metrics(workdir).get(metric_keys.TRAIN, {})
    return train[max(train)] if train else None


# A line that says why a run failed: our one-line errors, or a traceback's last line.
_ERROR_LINE = re.compile(r"^(error: .*|[A-Za-z_.]*(Error|Exception|Stopped|Interrupt)\b.*)$")


def last_error(workdir: storage.PathLike) -> str:
    """The last error line of the run's output (``train.log``, or SLURM's ``slurm-*.out``),
    or "" when there is none."""
    workdir = storage.path(workdir)
    logs = sorted(workdir.glob("slurm-*.out"), key=lambda p: p.stat().mtime)
    for path in [workdir / "train.log", *logs][::-1]:
        try:
            lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()[-200:]
        except OSError:
            continue
        for line in reversed(lines):
            if _ERROR_LINE.match(line.strip()):
                return line.strip()
    return ""


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def read_metric_records(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record of ``<workdir>/metrics.jsonl`` in order, a step logged twice (a resumed
    run) appearing twice; a workdir without the file has none.

    A record is what training writes: an object with a string SPLIT, an integer STEP >= 0
    and numbers (NaN and infinities included: a diverged loss). Lines that are not such a
    record (the partial line of a killed run, bytes that are not UTF-8, JSON nested too deep)
    are skipped, and values that are not numbers are left out of their record."""
    path = storage.path(workdir) / layout.METRICS
    if storage.not_a_file(path):
        return []
    records = []
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a line cut short by a killed run
        if isinstance(record, dict) and isinstance(record.get(metric_keys.SPLIT), str) and \
                _is_count(record.get(metric_keys.STEP)):
            records.append({key: value for key, value in record.items()
                            if key in (metric_keys.SPLIT, metric_keys.STEP)
                            or _is_number(value)})
    return records


def read_metrics(workdir: str | os.PathLike) -> dict[str, dict[int, dict[str, Any]]]:
    """{split: {step: record}} from ``metrics.jsonl``; for a step logged twice (a resumed
    run) the last line wins, and a later line adds its keys to the earlier ones."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for record in read_metric_records(workdir):
        out.setdefault(record[metric_keys.SPLIT], {}).setdefault(
            int(record[metric_keys.STEP]), {}).update(record)
    return out


# ----------------------------------------------------------------------------------------
# The settings a workdir was trained with


def read_config(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The settings of the run in ``workdir``: ``config.json`` with the changes recorded in
    ``config_changes.jsonl`` applied (None when there is no config.json).

    Raises UserError naming the file when config.json is damaged (not a JSON object).
    """
    path = storage.path(workdir) / layout.CONFIG
    why = storage.not_a_file(path)
    if why == "no such file":
        return None
    if why:
        raise UserError(f"{path}: {why}, not a JSON config")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a JSON config ({e})") from e
    except RecursionError:
        raise UserError(f"{path}: not a JSON config (nested too deep)") from None
    if not isinstance(saved, dict):
        raise UserError(f"{path}: not a JSON config (a {type(saved).__name__}, not an object "
                        "of sections)")
    changes = storage.path(workdir) / layout.CONFIG_CHANGES
    if not storage.not_a_file(changes):
        text = changes.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            try:
                fields = json.loads(line)["changes"]
            except (ValueError, KeyError, TypeError, RecursionError):
                continue  # a line cut short by a killed run
            if not isinstance(fields, dict):
                continue
            for field, change in fields.items():
                section, _, key = field.partition(".")
                if not key or "." in key or not isinstance(change, list) or len(change) != 2:
                    raise UserError(f"{changes} line {number}: {shown(field)}="
                                    f"{shown(str(change)[:40])} is not a change of a config "
                                    "field ([old, new])")
                if not isinstance(saved.setdefault(section, {}), dict):
                    raise UserError(f"{path}: {shown(section)} is "
                                    f"{shown(str(saved[section])[:40])}, not an object of fields")
                saved[section][key] = change[1]
    return saved


def checkpoint_steps_on_disk(workdir: storage.PathLike) -> list[int]:
    """The finished checkpoints in ``<workdir>/checkpoints`` (directories named by a step).

    Locally orbax writes a checkpoint under a temporary name, so a directory named by a step
    is finished; in a bucket it writes in place and marks a finished one with a commit file.
    """
    directory = storage.path(workdir) / layout.CHECKPOINTS
    if not directory.is_dir():
        return []
    # ASCII digits only: "١٢" or "²" pass str.isdigit but name no step orbax writes.
    steps = [p for p in directory.iterdir()
             if p.name.isascii() and p.name.isdigit() and p.is_dir()]
    if storage.is_remote(directory):
        import orbax.checkpoint as ocp

        steps = [p for p in steps if ocp.step.is_checkpoint_finalized(p)]
    return sorted(int(p.name) for p in steps)
