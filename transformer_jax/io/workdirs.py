"""What a training run's workdir says about it: its metrics, its last error, which run holds
it, and the settings it was trained with. Where a sweep's point stands and the sweep's
record of it are :mod:`transformer_jax.sweeps.status` and
:mod:`transformer_jax.sweeps.records`.

A workdir holds ``config.json`` (the config the run started with), ``config_changes.jsonl``
(settings changed on resume, one JSON object per resume), ``metrics.jsonl`` (one JSON object
per logged step and split), ``final_metrics.json`` (written at the end: step, validation
loss, perplexity, test BLEU...), ``checkpoints/<step>/``, ``hold.json`` while a training run
holds it (:class:`Hold`) and, when a sweep ran it, ``sweep_point.json``: the sweep's name,
the point, and one entry per attempt (start, command, wall and CPU seconds, exit status or
a scheduler's job id, machine).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import pathlib
import platform
import re
import socket
import threading
import time
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
# The hold: one training run per workdir

HEARTBEAT_S = 30.0  # how often the holder refreshes its heartbeat
# A hold from another host whose heartbeat is older than this is stale: its run is gone
# (ten missed heartbeats leave room for a slow shared file system).
STALE_AFTER_S = 300.0


def read_hold(workdir: str | os.PathLike) -> dict[str, Any] | None:
    """The hold on ``workdir``: {"host", "pid", "since", "heartbeat"} (times as ISO 8601
    strings with their UTC offset), or None when no training run holds it.

    The hold may be stale (its run gone without removing it): see :func:`hold_is_live`.
    """
    hold = read_json(storage.path(workdir) / layout.HOLD)
    if not isinstance(hold, dict) or not {"host", "pid", "since", "heartbeat"} <= hold.keys():
        return None
    if not (isinstance(hold["host"], str) and _is_count(hold["pid"])
            and isinstance(hold["since"], str) and isinstance(hold["heartbeat"], str)):
        # Not what a run writes: a damaged file, which no run holds the workdir with.
        logging.warning("warning: %s is damaged (%s); taken as no hold",
                        storage.path(workdir) / layout.HOLD, str(hold)[:80])
        return None
    return hold


def hold_is_live(hold: dict[str, Any], now: float | None = None) -> bool:
    """Whether the run that wrote ``hold`` (from :func:`read_hold`) may still be running.

    On this host: its process exists. On another host: its heartbeat is less than
    ``STALE_AFTER_S`` seconds older than ``now`` (Unix time; default the clock). A hold that
    is not live is stale, and the next training run takes it over.
    """
    if hold.get("host") == socket.gethostname():
        return _process_exists(hold.get("pid"))
    try:
        heartbeat = datetime.datetime.fromisoformat(hold["heartbeat"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return False
    return (time.time() if now is None else now) - heartbeat < STALE_AFTER_S


# The highest process id Linux gives (pid_max's ceiling, 2**22); a larger one is no process.
PID_MAX = 2**22


def _process_exists(pid: Any) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= PID_MAX:
        return False
    try:
        os.kill(pid, 0)  # signal 0: the existence check, nothing is sent
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def describe_hold(hold: dict[str, Any]) -> str:
    """A hold in words: "process 4242 on host-a since 2026-12-01T05:00:00+00:00"."""
    return f"process {hold.get('pid')} on {hold.get('host')} since {hold.get('since')}"


class Hold:
    """While entered, this process holds ``workdir`` (``hold.json``); a second training run
    on it stops with :class:`UserError` naming the holder.

    A stale hold (:func:`hold_is_live`) is taken over, with a warning. A background thread
    rewrites the heartbeat every ``heartbeat_s`` seconds; leaving the context, normally or
    by an exception, stops it and removes the file. In a multi-process run only process 0
    holds the workdir (``enabled`` False elsewhere). Two runs started within the same
    instant can both miss each other's hold; the check is for runs started by hand or by a
    launcher, seconds or days apart.
    """

    def __init__(self, workdir: str | os.PathLike, enabled: bool = True,
                 heartbeat_s: float = HEARTBEAT_S):
        self.path = storage.path(workdir) / layout.HOLD
        self.enabled = enabled
        self.heartbeat_s = heartbeat_s
        self.mine = {"host": socket.gethostname(), "pid": os.getpid(), "since": now()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Hold:
        if not self.enabled:
            return self
        workdir = self.path.parent
        workdir.mkdir(parents=True, exist_ok=True)
        held = read_hold(workdir)
        if held is not None:
            if hold_is_live(held):
                raise self._in_use(held)
            logging.warning("taking over %s from a run that is gone: %s, last heartbeat %s",
                            workdir, describe_hold(held), held.get("heartbeat"))
        # Two runs starting at once each write their own file; the read below tells which
        # one won.
        with contextlib.suppress(FileNotFoundError):
            self._write()
        held = read_hold(workdir)
        if held is None:
            raise UserError(f"{self.path}: written but not readable back; is {workdir} on a "
                            "working file system?")
        if not self._is_mine(held):
            raise self._in_use(held)
        self._thread = threading.Thread(target=self._beat, name="workdir-hold", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._is_mine(read_hold(self.path.parent)):
            self.path.unlink(missing_ok=True)

    def _in_use(self, held: dict[str, Any]) -> UserError:
        return UserError(f"{self.path.parent} is in use by another training run: "
                         f"{describe_hold(held)} (heartbeat {held.get('heartbeat')}, "
                         f"{self.path}); wait for it to end or choose another --workdir")

    def _is_mine(self, held: dict[str, Any] | None) -> bool:
        return held is not None and all(held.get(k) == v for k, v in self.mine.items())

    def _write(self) -> None:
        storage.write_atomically(self.path, json.dumps({**self.mine, "heartbeat": now()}))

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            held = read_hold(self.path.parent)
            if held is not None and not self._is_mine(held):
                # Taken over while this run's heartbeat was late: the other run now owns
                # the file, and it is not rewritten. (A removed file is written again.)
                logging.warning("%s is now held by %s; this run no longer refreshes it",
                                self.path.parent, describe_hold(held))
                return
            try:
                self._write()
            except OSError as e:  # a full or unreachable disk: retried at the next beat
                logging.warning("could not refresh %s: %s", self.path, e)


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
