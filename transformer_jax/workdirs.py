"""What a training run's workdir says about it: finished or not, its metrics, and the
sweep's record of its attempts.

A workdir holds ``config.json``, ``metrics.jsonl`` (one JSON object per logged step and
split), ``final_metrics.json`` (written at the end: step, validation loss, perplexity, test
BLEU...), ``checkpoints/<step>/`` and, when a sweep ran it, ``sweep_point.json``: the
sweep's name, the point, and one entry per attempt (start, command, wall and CPU seconds, exit
status or SLURM job id, machine).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformer_jax import faults


@dataclasses.dataclass(frozen=True)
class Status:
    """``kind`` is one of finished, unfinished, failed, queued (SLURM) or missing."""

    kind: str
    step: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        return self.kind + (f" ({self.detail})" if self.detail else "")


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable (being written)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def last_logged_step(workdir: Path) -> int | None:
    """The highest step in ``metrics.jsonl`` (None when nothing was logged)."""
    steps = []
    path = workdir / "metrics.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                steps.append(int(json.loads(line)["step"]))
            except (ValueError, KeyError, TypeError):
                continue
    return max(steps, default=None)


def point_status(workdir: Path, num_steps: int, squeue: Callable[[str], bool] | None = None
                 ) -> Status:
    """Where one point stands: finished means ``final_metrics.json`` says step ==
    ``num_steps``."""
    final = read_json(workdir / "final_metrics.json")
    if isinstance(final, dict) and final.get("step") == num_steps:
        return Status("finished", num_steps)
    record = read_json(workdir / "sweep_point.json") or {}
    attempts = record.get("attempts") or [{}]
    last = attempts[-1]
    step = last_logged_step(workdir)
    if last.get("job_id") and squeue is not None and squeue(last["job_id"]):
        return Status("queued", step, f"SLURM job {last['job_id']}")
    if last.get("returncode") not in (None, 0):
        return Status("failed", step, f"exit {last['returncode']}, at step {step or 0} of "
                      f"{num_steps}")
    if step is not None or (workdir / "checkpoints").exists():
        return Status("unfinished", step, f"step {step or 0} of {num_steps}")
    return Status("missing")


def machine() -> str:
    """This machine in words: cores, CPU model and memory."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
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


def record_point(workdir: Path, header: dict[str, Any],
                 attempt: dict[str, Any] | None = None) -> None:
    """Updates ``workdir/sweep_point.json`` with ``header`` (the sweep's name, the point, its
    swept values and seeds) and adds ``attempt`` if given; written whole or not at all."""
    path = workdir / "sweep_point.json"
    record = read_json(path) or {}
    record.update(header)
    record.setdefault("attempts", [])
    if attempt is not None:
        record["attempts"].append(attempt)
    workdir.mkdir(parents=True, exist_ok=True)
    faults.write_text_atomically(path, json.dumps(record, indent=2))


def record_attempt(workdir: Path, header: dict[str, Any], attempt: dict[str, Any]) -> None:
    """Adds an attempt to ``workdir/sweep_point.json``."""
    record_point(workdir, header, attempt)


def last_train_record(workdir: Path) -> dict[str, Any] | None:
    """The last training log line of ``metrics.jsonl`` (step, loss, tokens/s, steps/s...)."""
    train = read_metrics(workdir).get("train", {})
    return train[max(train)] if train else None


# A line that says why a run failed: our one-line errors, or a traceback's last line.
_ERROR_LINE = re.compile(r"^(error: .*|[A-Za-z_.]*(Error|Exception|Stopped|Interrupt)\b.*)$")


def last_error(workdir: Path) -> str:
    """The last error line of the run's output (``train.log``, or SLURM's ``slurm-*.out``),
    or "" when there is none."""
    logs = sorted(workdir.glob("slurm-*.out"), key=lambda p: p.stat().st_mtime)
    for path in [workdir / "train.log", *logs][::-1]:
        try:
            lines = path.read_text(errors="replace").splitlines()[-200:]
        except OSError:
            continue
        for line in reversed(lines):
            if _ERROR_LINE.match(line.strip()):
                return line.strip()
    return ""


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def read_metrics(workdir: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """{split: {step: record}} from ``metrics.jsonl``; for a step logged twice (a resumed
    run) the last line wins, and a later line adds its keys to the earlier ones."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            split, step = record["split"], int(record["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a killed run
        out.setdefault(split, {}).setdefault(step, {}).update(record)
    return out
