"""What a training run's workdir says about it: its metrics, its last error and the settings
it was trained with. Which run holds it is :mod:`transformer_jax.io.holds`; where a sweep's
point stands and the sweep's record of it are :mod:`transformer_jax.sweeps.status` and
:mod:`transformer_jax.sweeps.records`. Every JSON record is read by
:mod:`transformer_jax.io.strict_json`.

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
import os
import pathlib
import platform
import re
from typing import Any

from transformer_jax.errors import UserError, shown
from transformer_jax.io import layout, metric_keys, storage, strict_json


def read_object(path: storage.PathLike, nan: bool = False) -> dict[str, Any] | None:
    """The JSON object in ``path``: None when there is none, or when it is damaged (not
    JSON, not an object, not a regular file: strict_json's rules), with a warning naming
    the file and the damage. For the files that only describe a run; ``nan`` allows NaN."""
    return strict_json.read_or_none(path, nan=nan)


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
    final = read_object(path, nan=True) or {}  # a diverged run's loss: NaN
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
        strict_json.warn(f"{path}: left out " + ", ".join(
            f"{shown(key)}={shown(str(final[key]))[:40]!r}" for key in bad)
            + ", not of the type training writes")
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
    and numbers (NaN and infinities included: a diverged loss). Each line is judged on its
    own (:func:`metric_record`): a line that is no such record is left out and a value that
    is not a number left out of its record, each with a warning naming the file and the line
    (a line cut short says so: a run killed while writing it, normal after a preemption);
    every good record is read."""
    path = storage.path(workdir) / layout.METRICS
    try:
        lines = list(strict_json.read_lines(path, nan=True))
    except strict_json.Damaged as e:
        strict_json.warn(f"{e}; no metrics read from it")
        return []
    records = []
    for number, value in lines:
        if isinstance(value, strict_json.Damaged):
            strict_json.warn(f"{value}: " + ("a run stopped while writing it; left out" if
                                             value.cut_short else "left out"))
            continue
        record, problem = metric_record(value)
        if problem:
            strict_json.warn(f"{path} line {number}: {problem}")
        if record is not None:
            records.append(record)
    return records


def metric_record(value: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(the record, "") when the object ``value`` of a metrics.jsonl line is one training
    writes; (the record less what is not a number, what was left out) when some values are
    not numbers; (None, why) when it is no record (no split's name, no step)."""
    split, step = value.get(metric_keys.SPLIT), value.get(metric_keys.STEP)
    if not isinstance(split, str) or not split:
        return None, f"{metric_keys.SPLIT}={shown(repr(split))[:40]} is not a split's name; " \
                     "left out"
    if not _is_count(step):
        return None, f"{metric_keys.STEP}={shown(repr(step))[:40]} is not an integer >= 0; " \
                     "left out"
    bad = [k for k, v in value.items()
           if k not in (metric_keys.SPLIT, metric_keys.STEP) and not _is_number(v)]
    record = {k: v for k, v in value.items() if k not in bad}
    if not bad:
        return record, ""
    return record, "left out " + ", ".join(f"{shown(k)[:40]}={shown(repr(value[k]))[:40]}"
                                           for k in bad) + (", not numbers" if len(bad) > 1
                                                            else ", not a number")


def read_metrics(workdir: str | os.PathLike) -> dict[str, dict[int, dict[str, Any]]]:
    """{split: {step: record}} from ``metrics.jsonl``; for a step logged twice (a resumed
    run) the last line wins, and a later line adds its keys to the earlier ones."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for record in read_metric_records(workdir):
        out.setdefault(record[metric_keys.SPLIT], {}).setdefault(
            int(record[metric_keys.STEP]), {}).update(record)
    return out


def latest(records: dict[int, dict[str, Any]], key: str) -> Any:
    """The value of ``key`` in the latest of ``records`` ({step: record}, as
    :func:`read_metrics` gives a split's) that has it; None when none has."""
    for step in sorted(records, reverse=True):
        if key in records[step]:
            return records[step][key]
    return None


# ----------------------------------------------------------------------------------------
# The settings a workdir was trained with


def read_config(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The settings of the run in ``workdir``: ``config.json`` with the changes recorded in
    ``config_changes.jsonl`` applied (None when there is no config.json).

    Raises UserError naming the file when config.json is damaged (strict_json's rules: a
    JSON object, no NaN, no key twice...) and naming the line of config_changes.jsonl that
    is not a record of changes; a line cut short (a run killed while writing it) is left out
    with a warning.
    """
    path = storage.path(workdir) / layout.CONFIG
    saved = strict_json.read(path)
    if saved is None:
        return None
    changes = storage.path(workdir) / layout.CONFIG_CHANGES
    for number, record in strict_json.read_lines(changes):
        if isinstance(record, strict_json.Damaged):
            if not record.cut_short:
                raise record
            strict_json.warn(f"{record}: a run stopped while writing it; left out")
            continue
        fields = record.get("changes")
        if not isinstance(fields, dict):
            raise UserError(f"{changes} line {number}: changes={shown(str(fields))[:40]!r} is "
                            "not an object of changed fields")
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
