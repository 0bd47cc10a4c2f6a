"""Where a sweep's points stand: finished, stopped early by training (pruned or diverged),
unfinished, failed, queued with the scheduler of the launcher that submitted them, running,
or not started; and ``--status``'s lines."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformer_jax.errors import ConfigError
from transformer_jax.io import holds, layout, metric_keys, storage, workdirs
from transformer_jax.sweeps import launchers, records
from transformer_jax.sweeps.experiment import Point, Sweep
from transformer_jax.sweeps.points import point_config

# The kinds of a point that will not train again: finished, or stopped early by training
# (training/stops.py: a search's pruner stopped it, or its loss diverged).
DONE = ("finished", "pruned", "diverged")


@dataclasses.dataclass(frozen=True)
class Status:
    """``kind`` is one of finished, pruned, diverged, unfinished, failed, queued (by a
    scheduler) or missing."""

    kind: str
    step: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        return self.kind + (f" ({self.detail})" if self.detail else "")


def queued(record: dict[str, Any]) -> tuple[str, str, str] | None:
    """(scheduler, its state of the job, job id) while the scheduler of the launcher that
    submitted the point's last attempt still has its job queued or running; else None."""
    job = (record.get("attempts") or [{}])[-1].get("job_id")
    if not job:
        return None
    try:
        launcher = launchers.get(str(record.get("launcher", "")))
    except ConfigError:  # a launcher this installation does not have
        return None
    state = launcher.queue_state(str(job)) if launcher.scheduler else None
    return (launcher.scheduler, state, str(job)) if state else None


def point_status(workdir: storage.PathLike, num_steps: int, ask_queue: bool = False
                 ) -> Status:
    """Where one point stands: finished means ``final_metrics.json`` says step ==
    ``num_steps``; queued (with ``ask_queue``) that its launcher's scheduler still has the
    job of its last attempt."""
    workdir = storage.path(workdir)
    final = workdirs.read_final(workdir)
    if final.get(metric_keys.STEP) == num_steps:
        return Status("finished", num_steps)
    if final.get(metric_keys.STOPPED):
        stop = stopped(workdir)
        if stop is not None:
            return Status(stop.reason, stop.step, f"at step {stop.step} of {num_steps}")
    record = records.read_point(workdir)
    last = (record.get("attempts") or [{}])[-1]
    step = workdirs.last_logged_step(workdir)
    queue = queued(record) if ask_queue else None
    if queue:
        return Status("queued", step, f"{queue[0]} job {queue[2]}")
    if last.get("returncode") not in (None, 0):
        return Status("failed", step, f"exit {last['returncode']}, at step {step or 0} of "
                      f"{num_steps}")
    if step is not None or (workdir / layout.CHECKPOINTS).exists():
        return Status("unfinished", step, f"step {step or 0} of {num_steps}")
    return Status("missing")


def stopped(workdir: storage.Path) -> Any:
    """The early stop that ended the point's training (``reason`` pruned or diverged, at
    ``step``), or None: read by training's own reader of its final record."""
    from transformer_jax.training import stops

    return stops.stopped(workdir)


def running(workdir: storage.PathLike) -> bool:
    """Whether a run holds the workdir now (holds.Hold): a live process on this host, or
    a heartbeat of the last few minutes from another."""
    hold = holds.read_hold(workdir)
    return hold is not None and holds.hold_is_live(hold)


def point_progress(workdir: storage.Path, num_steps: int, ask_queue: bool = True
                   ) -> dict[str, Any]:
    """Where one point stands: ``state`` (not started, running, queued, finished, pruned,
    diverged, failed, stopped), its last logged step, loss and tokens/s, the seconds left at
    its last speed, and the last error line of a failed point."""
    record = records.read_point(workdir)
    status = point_status(workdir, num_steps)
    log = workdirs.last_train_record(workdir) or {}
    step = log.get(metric_keys.STEP)
    state = status.kind if status.kind == "finished" else str(status)
    if status.kind not in DONE:
        state = status.kind
        queue = queued(record) if ask_queue else None
        if queue:
            scheduler, job_state, job = queue
            state = f"{job_state.lower()} under {scheduler} (job {job})"
        elif running(workdir):
            state = "running"
        elif state == "missing":
            state = "not started"
        elif state == "unfinished":
            state = "stopped"
    speed = log.get(metric_keys.STEPS_PER_S)
    left = (num_steps - step) / speed if speed and step is not None and \
        state == "running" else None
    return {"state": state, "step": step, "num_steps": num_steps,
            "loss": log.get(metric_keys.LOSS), "tokens_per_s": log.get(metric_keys.TOKENS_PER_S),
            "seconds_left": left,
            "error": workdirs.last_error(workdir) if state == "failed" else "",
            "wall_s": sum(a.get("wall_s", 0.0) for a in record.get("attempts", []))}


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def status_lines(sweep: Sweep, root: str, scale: str = "paper",
                 overrides: dict[str, Any] | None = None, ask_queue: bool = True,
                 points: list[Point] | None = None) -> list[str]:
    """One line per point (state, last step, loss, tokens/s, time left or the last error
    line), then the sweep's totals. ``ask_queue``: ask the scheduler of a point submitted
    to one whether its job still waits or runs. ``points``: those of a search's trials, in
    place of the sweep's grid."""
    points = sweep.points() if points is None else points
    if not points:
        return ["0 points"]
    rows = []
    for point in points:
        config = point_config(sweep, point, scale, overrides)[0]
        rows.append((point, point_progress(storage.path(root) / point.name,
                                           config.train.num_steps, ask_queue)))
    width = max(len(p.name) for p in points)
    lines = []
    for point, r in rows:
        parts = [f"{point.name:<{width}}", r["state"]]
        if r["step"] is not None:
            parts.append(f"step {r['step']:,}/{r['num_steps']:,}")
        if r["loss"] is not None:
            parts.append(f"loss {r['loss']:.3f}")
        if r["tokens_per_s"] is not None:
            parts.append(f"{r['tokens_per_s']:,.0f} tokens/s")
        if r["seconds_left"] is not None:
            parts.append(f"~{_minutes(r['seconds_left'])} left")
        if r["error"]:
            parts.append(r["error"])
        lines.append("  ".join(parts))
    counts: dict[str, int] = {}
    for _, r in rows:
        key = r["state"].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    total = f"{len(rows)} points: " + ", ".join(f"{n} {k}" for k, n in counts.items())
    done = [r["wall_s"] for _, r in rows if r["state"] == "finished" and r["wall_s"]]
    waiting = sum(1 for _, r in rows if r["state"] in ("not started", "stopped", "failed"))
    left = sum(r["seconds_left"] or 0.0 for _, r in rows)
    if done and waiting:
        left += waiting * sum(done) / len(done)
    if left:
        total += (f"; about {_minutes(left)} of training left, one point at a time"
                  + (" (points not running counted at the finished points' mean)"
                     if done and waiting else ""))
    return [*lines, total]
