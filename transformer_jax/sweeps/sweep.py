"""Sweeps: one training run per point of a grid, each in its own workdir, run here,
printed, or submitted to SLURM or a Cloud TPU pod slice; where they stand; what they record.

    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads \
        [--seeds=3] [--launcher=local|print|slurm|tpu] [--scale=demo] [--parallel=K] \
        [--dry_run] [--status] [--config.FIELD=VALUE ...]
    python -m transformer_jax.sweep configs/table3.py:base --root=runs/lr \
        --grid=optim.lr_scale=0.5,1,2 --grid=optim.warmup_steps=2000,4000 --seeds=3

The first argument is an experiment file or a config file with its variant. An experiment
file defines ``get_sweep(arg) -> Sweep``: a config file (``configs/table3.py``) and a grid of
points built with :mod:`transformer_jax.sweeps.hyper` over named variants and any dotted field. A
config file sweeps its variant over the ``--grid`` axes alone. ``--grid`` axes and ``--seeds``
multiply either's points. Each point trains in ``ROOT/NAME``, named after its values
(``lr_scale=0.5,warmup_steps=2000,seed=1``), with the ordinary command ``python -m
transformer_jax.main --config=CONFIG:VARIANT --workdir=ROOT/NAME --config.FIELD=VALUE ...``,
the overrides being every field where the point's config differs from the config file's own.

Re-running a sweep is safe: a finished point (``final_metrics.json`` at the config's last
step) is skipped and an unfinished one is started again, which resumes from its latest
checkpoint. ``ROOT/sweep.json`` records the sweep for ``python -m transformer_jax.compare
ROOT``; ``ROOT/NAME/sweep_point.json`` records the point (its swept values and seeds) and each
attempt (command, start, wall and CPU seconds, exit status, SLURM job id). ``--status`` says
where every point stands.

``--scale=demo`` trains every point at the demo scale of config.SCALES on the built-in corpus.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import importlib.util
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from transformer_jax import config as config_lib
from transformer_jax.config import resume
from transformer_jax.errors import ConfigError, UserError
from transformer_jax.io import layout, storage, workdirs
from transformer_jax.sweeps import hyper

REPO = Path(__file__).resolve().parents[2]
LAUNCHERS = ("local", "print", "slurm", "tpu")


@dataclasses.dataclass(frozen=True)
class Sweep:
    """An experiment: a grid of points (transformer_jax.sweeps.hyper) on one config file.

    ``parameter`` is the quantity on the report's x axis: a Table 3 quantity
    (config.QUANTITIES, read from each point's variant at the paper's scale), a swept field,
    or "" for the first swept field. ``overrides`` apply to every point, ``demo_overrides``
    to every point at scale "demo"; ``variant`` is that of points that name none.
    """

    name: str
    config: str
    grid: Sequence[dict[str, Any]]
    parameter: str = ""
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    demo_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""
    variant: str = "base"

    def points(self) -> list[Point]:
        """The grid's points, named; UserError when two are the same."""
        try:
            labels = hyper.names(self.grid, default=self.variant)
        except ValueError as e:
            raise UserError(f"sweep {self.name}: {e}") from e
        fields, parameter = hyper.varying(self.grid), self.axis()
        return [Point(label, dict(g), g.get(hyper.VARIANT, self.variant),
                      hyper.setting(g, fields) or g.get(hyper.VARIANT, self.variant),
                      self._value(g, parameter))
                for label, g in zip(labels, self.grid, strict=True)]

    def axis(self) -> str:
        """The report's x axis: ``parameter``, or the first swept field."""
        return self.parameter or next(iter(hyper.varying(self.grid)), hyper.VARIANT)

    def _value(self, point: dict[str, Any], parameter: str) -> Any:
        if parameter in point:
            return point[parameter]
        variant = point.get(hyper.VARIANT, self.variant)
        if parameter in config_lib.QUANTITIES and variant in config_lib.VARIANTS:
            return config_lib.quantity(config_lib.build(variant), parameter)
        return variant


@dataclasses.dataclass(frozen=True)
class Point:
    """One training run: ``name`` (its workdir under the root), its grid ``fields``
    (``"variant"``, ``"seed"`` and dotted config fields), its ``variant`` of the config file,
    its ``setting`` (the name without the seed: replicas over seeds share it) and the value
    of the sweep's parameter."""

    name: str
    fields: dict[str, Any]
    variant: str
    setting: str
    value: Any

    @property
    def label(self) -> str:
        return self.name


# ----------------------------------------------------------------------------------------
# Experiments and the configs of their points


def _load_module(path: Path, kind: str) -> Any:
    if not path.is_file():
        raise UserError(f"no {kind} file {path}")
    spec = importlib.util.spec_from_file_location(f"_{kind}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_experiment(spec: str, grid: Sequence[str] = (), seeds: int = 0) -> Sweep:
    """The sweep of ``"experiments/FILE.py[:ARG]"`` (``get_sweep(ARG)``) or of
    ``"configs/FILE.py[:VARIANT]"`` (its variant alone), times the ``--grid`` axes
    (``"optim.lr_scale=0.5,1,2"``) and ``seeds`` seeds."""
    path, _, arg = spec.partition(":")
    module = _load_module(Path(path), "experiment")
    if hasattr(module, "get_sweep"):
        sweep = module.get_sweep(arg or None)
    elif hasattr(module, "get_config"):
        variant, options = config_lib.parse_variant_arg(arg or None)
        if options:
            raise UserError(f"{spec}: give the variant alone (dataset and scale come from "
                            "--config.data.name and --scale)")
        name = f"{Path(path).stem}_{variant}"
        sweep = Sweep(name=name, config=path, grid=[{hyper.VARIANT: variant}],
                      description=f"{path}:{variant}", variant=variant)
    else:
        raise UserError(f"{path}: an experiment file defines get_sweep(arg) -> Sweep, a config "
                        "file get_config(arg)")
    axes = [parse_grid(g) for g in grid]
    if seeds and any(f in hyper.SEED_LIKE for axis in [sweep.grid, *axes] for p in axis
                     for f in p):
        raise UserError(f"--seeds={seeds}: {spec} and its --grid sweep seeds already")
    axes += [hyper.seeds(seeds)] if seeds else []
    if axes:
        sweep = dataclasses.replace(sweep, grid=hyper.product([sweep.grid, *axes]))
    sweep.points()  # names unique
    return sweep


def parse_grid(text: str) -> list[dict[str, Any]]:
    """The axis of ``--grid=FIELD=V1,V2,...``, each value read as the field's type (``variant``
    takes variant names); UserError naming the field or value that does not fit."""
    field, sep, values = text.partition("=")
    field = field.strip().removeprefix("config.")
    if not sep or not values.strip():
        raise UserError(f"--grid={text}: give FIELD=VALUE,VALUE,... e.g. "
                        "--grid=optim.lr_scale=0.5,1,2")
    items = [v.strip() for v in values.split(",")]
    if field in (hyper.VARIANT, hyper.SEED):
        return hyper.sweep(field, [int(v) if field == hyper.SEED and v.isdigit() else v
                                   for v in items])
    try:
        current = config_lib._get(config_lib.base_config(), field)
    except ConfigError as e:
        raise UserError(f"--grid={text}: unknown config field {field}") from e
    return hyper.sweep(field, [_parse_value(field, v, current) for v in items])


def _parse_value(field: str, text: str, current: Any) -> Any:
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, tuple | list):
            return tuple(int(x) for x in text.split(":") if x)
    except ValueError:
        kind = type(current).__name__
        raise UserError(f"--grid: {field}={text!r} is not a {kind}") from None
    return text


@functools.cache
def _config_module(path: str) -> Any:
    return _load_module(Path(path), "config")


def config_arg(point: Point, scale: str) -> str:
    """The config file's argument for a point: ``VARIANT`` at the paper's scale,
    ``VARIANT,dataset=builtin,scale=demo`` at the demo scale."""
    return point.variant + ("" if scale == "paper" else f",dataset=builtin,scale={scale}")


def point_config(sweep: Sweep, point: Point, scale: str = "paper",
                 overrides: dict[str, Any] | None = None
                 ) -> tuple[ml_collections.ConfigDict, ml_collections.ConfigDict]:
    """(the point's config, the config file's own config for the point's variant).

    In order: the config file's variant at the scale, end-of-run BLEU settings, the sweep's
    overrides, the point's grid values (``seed`` setting every field of
    config.SEED_FIELDS), then ``overrides`` (from the command line), each applied by
    config.apply_overrides. Raises ConfigError naming the point.
    """
    try:
        own = _config_module(sweep.config).get_config(config_arg(point, scale))
        c = ml_collections.ConfigDict(own.to_dict())
        values = {k: v for k, v in point.fields.items()
                  if k not in (hyper.VARIANT, hyper.SEED, hyper.NAME)}
        if hyper.SEED in point.fields:
            values.update(dict.fromkeys(config_lib.SEED_FIELDS, point.fields[hyper.SEED]))
        layers = [config_lib.SCALES[scale].sweep, sweep.overrides,
                  sweep.demo_overrides if scale == "demo" else {}, values, overrides or {}]
        for layer in layers:
            config_lib.apply_overrides(c, layer, f"point {point.name}")
        if not any("train.bleu_every" in layer for layer in layers):
            # Validation BLEU once, at the last step (known only now, after the overrides).
            c.train.bleu_every = c.train.num_steps if c.train.bleu_sentences else 0
        c.train.visualize_sentences = ()  # sweeps draw no pictures
        config_lib.validate(c)
    except UserError as e:
        message = str(e) if str(e).startswith("point ") else f"point {point.name}: {e}"
        raise ConfigError(message) from e
    return c, own


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        value = tuple(value)
    return repr(value) if isinstance(value, float | tuple) else str(value)


def config_overrides(config: ml_collections.ConfigDict,
                     own: ml_collections.ConfigDict) -> list[str]:
    """``--config.FIELD=VALUE`` for every field where ``config`` differs from ``own``."""
    mine, theirs = _flatten(config.to_dict()), _flatten(own.to_dict())
    return [f"--config.{k}={_format(v)}" for k, v in mine.items()
            if k not in theirs or _format(theirs[k]) != _format(v)]


def train_args(sweep: Sweep, point: Point, scale: str, config: ml_collections.ConfigDict,
               own: ml_collections.ConfigDict, root: str) -> tuple[str, str, list[str]]:
    """(config argument, workdir, overrides) of the point's training command."""
    return (f"{sweep.config}:{config_arg(point, scale)}", os.path.join(root, point.name),
            config_overrides(config, own))


def command(launcher: str, sweep: Sweep, point: Point, args: tuple[str, str, list[str]],
            python: str = "python") -> list[str]:
    """The command that trains one point with ``launcher``."""
    config, workdir, overrides = args
    if launcher == "slurm":
        return ["sbatch", "--parsable", f"--job-name={sweep.name}-{point.name}",
                f"--output={workdir}/slurm-%j.out", "launch/slurm.sbatch", config, workdir,
                *overrides]
    if launcher == "tpu":
        return ["launch/tpu_pod.sh", config, workdir, *overrides]
    return [python, "-m", "transformer_jax.main", f"--config={config}", f"--workdir={workdir}",
            *overrides]


# ----------------------------------------------------------------------------------------
# Running a sweep


def slurm_job_state(job_id: str) -> str | None:
    """SLURM's state of a job still queued or running ("PENDING", "RUNNING", ...), or None
    when it has left the queue or there is no squeue."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    state = out.stdout.strip()
    return state if out.returncode == 0 and state else None


def slurm_job_active(job_id: str) -> bool:
    """Whether SLURM still has the job queued or running (False without squeue)."""
    return slurm_job_state(job_id) is not None


def _check_root(root: storage.Path, definition: dict[str, Any]) -> None:
    old = workdirs.read_json(root / layout.SWEEP)
    if old and (old.get("name"), old.get("scale")) != (definition["name"],
                                                       definition["scale"]):
        raise UserError(f"{root} holds the sweep {old.get('name')} at scale {old.get('scale')}"
                        f"; run {definition['name']} at scale {definition['scale']} under "
                        "another --root")


def _check_workdir_model(workdir: storage.Path, config: ml_collections.ConfigDict,
                         label: str) -> None:
    """A workdir trained with another model or data cannot resume this point."""
    saved = workdirs.read_json(workdir / layout.CONFIG)
    if not isinstance(saved, dict) or not (workdir / layout.CHECKPOINTS).exists():
        return
    conflicts = resume.resume_conflicts(saved, config.to_dict())
    if conflicts:
        raise UserError(f"point {label}: {workdir}/config.json differs from the sweep's "
                        f"config: {'; '.join(conflicts)}; use another --root or remove the "
                        "workdir")


def point_record(sweep: Sweep, point: Point, config: ml_collections.ConfigDict
                 ) -> dict[str, Any]:
    """What the sweep says of a point, in sweep.json and the point's sweep_point.json: its
    name, setting, variant, swept values and seeds."""
    return {"name": point.name, "setting": point.setting, "variant": point.variant,
            "value": point.value, "fields": point.fields,
            "seeds": {f: config_lib._get(config, f) for f in config_lib.SEED_FIELDS}}


def definition(sweep: Sweep, points: Sequence[Point], configs: dict[str, Any], scale: str,
               experiment: str) -> dict[str, Any]:
    """The sweep as recorded in ROOT/sweep.json."""
    return {"name": sweep.name, "experiment": experiment, "config": sweep.config,
            "parameter": sweep.axis(), "swept": hyper.varying(sweep.grid), "scale": scale,
            "description": sweep.description,
            "points": [{**point_record(sweep, p, configs[p.name][0]),
                        "config": configs[p.name][0].to_dict()} for p in points]}


def run_sweep(sweep: Sweep, root: str, launcher: str = "local", scale: str = "paper",
              parallel: int = 1, dry_run: bool = False,
              overrides: dict[str, Any] | None = None, experiment: str = "",
              python: str = sys.executable) -> dict[str, str]:
    """Runs, prints or submits every point not yet finished; returns {point: outcome}.

    Every point's config is built and validated before anything starts. ``print`` writes
    the commands to stdout as a shell script; ``dry_run`` shows the launcher's commands and
    changes nothing.
    """
    if launcher not in LAUNCHERS:
        raise UserError(f"--launcher={launcher} is not one of {', '.join(LAUNCHERS)}")
    if scale not in config_lib.SCALES:
        raise UserError(f"--scale={scale} is not one of {', '.join(config_lib.SCALES)}")
    if parallel < 1:
        raise UserError(f"--parallel={parallel} must be >= 1")
    if launcher == "tpu" and parallel > 1:
        raise UserError("--launcher=tpu runs one point at a time on the pod slice; "
                        "use --parallel=1")
    points = sweep.points()
    configs = {p.name: point_config(sweep, p, scale, overrides) for p in points}
    root_path = storage.path(root)
    record = definition(sweep, points, configs, scale, experiment)
    _check_root(root_path, record)
    if not dry_run:
        root_path.mkdir(parents=True, exist_ok=True)
        storage.write_atomically(root_path / layout.SWEEP, json.dumps(record, indent=2))

    outcome, todo = {}, []
    squeue = slurm_job_active if launcher == "slurm" else None
    for point in points:
        config = configs[point.name][0]
        status = workdirs.point_status(root_path / point.name, config.train.num_steps, squeue)
        if status.kind in ("finished", "queued"):
            outcome[point.name] = f"skipped: {status}"
            logging.info("%s: %s, skipped", point.name, status)
            if launcher == "print":
                print(f"# {point.name}: {status}")
            continue
        _check_workdir_model(root_path / point.name, config, point.name)
        todo.append((point, status))
    if launcher == "local" and todo and not dry_run:
        peak = _shared_cpu_peak([configs[p.name][0] for p, _ in todo])
        configs.update({p.name: point_config(sweep, p, scale, {**(overrides or {}), **peak})
                        for p, _ in todo})

    pending = []
    for point, status in todo:
        config, own = configs[point.name]
        cmd = command(launcher if launcher != "print" else "local", sweep, point,
                      train_args(sweep, point, scale, config, own, root),
                      python if launcher == "local" else "python")
        if launcher == "print":
            print(shlex.join(cmd))
        elif dry_run:
            print(f"# {point.name} ({status}):\n{shlex.join(cmd)}")
        else:
            pending.append((point, root_path / point.name, cmd, config))
            continue
        outcome[point.name] = "printed"
    if not pending:
        return outcome
    header = functools.partial(_header, sweep, launcher=launcher)
    for point, workdir, _, config in pending:
        # Before the run starts: it reads its swept values from here for TensorBoard.
        workdirs.record_point(workdir, {**header(point), **point_record(sweep, point, config)})
    if launcher == "slurm":
        for point, workdir, cmd, _ in pending:
            outcome[point.name] = _submit_slurm(cmd, workdir, header(point))
    else:
        run = functools.partial(_run_here, total=len(pending), header=header, root=root_path)
        workers = parallel if launcher == "local" else 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run, i, *item): item[0].name
                       for i, item in enumerate(pending)}
            for future in concurrent.futures.as_completed(futures):
                outcome[futures[future]] = future.result()
    return outcome


def _header(sweep: Sweep, point: Point, launcher: str) -> dict[str, Any]:
    return {"sweep": sweep.name, "point": point.name, "variant": point.variant,
            "value": point.value, "launcher": launcher}


def _run_here(index: int, point: Point, workdir: storage.Path, cmd: list[str],
              config: ml_collections.ConfigDict, *, total: int,
              header: Callable[[Point], dict], root: storage.Path) -> str:
    """Runs one point's command here, its output appended to ``WORKDIR/train.log`` (the
    TPU launcher's goes to the console, its workdir being on the workers' storage). In a
    bucket the output passes through this process, which rewrites the log object as it
    grows (``storage.LineLog``)."""
    local = cmd[0] != "launch/tpu_pod.sh"
    logging.info("[%d/%d] %s: %s", index + 1, total, point.label, shlex.join(cmd))
    if local:
        workdir.mkdir(parents=True, exist_ok=True)
        share_vocabulary(root, workdir, config)
    start, started = time.time(), workdirs.now()
    if not local:
        proc = subprocess.Popen(cmd)
    elif storage.is_remote(workdir):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        with storage.LineLog(workdir / "train.log") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
    else:
        with open(workdir / "train.log", "a") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    # wait4 gives the child's CPU time as well as its exit status.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = returncode = os.waitstatus_to_exitcode(status)
    wall = time.time() - start
    attempt = {"started": started, "wall_s": round(wall, 1),
               "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "returncode": returncode,
               "command": cmd, "machine": workdirs.machine()}
    if local:
        workdirs.record_attempt(workdir, header(point), attempt)
    result = "finished" if returncode == 0 else f"failed (exit {returncode})"
    where = f"; log: {workdir / 'train.log'}" if local and returncode else ""
    logging.info("%s: %s in %.0f s (%.0f CPU s)%s", point.label, result, wall,
                 attempt["cpu_s"], where)
    return result


# Data fields that decide the vocabulary a run trains.
VOCAB_FIELDS = ("name", "data_dir", "source_lang", "target_lang", "train_files",
                "vocab_size", "vocab_sample")


def share_vocabulary(root: storage.Path, workdir: storage.Path,
                     config: ml_collections.ConfigDict) -> bool:
    """Copies the vocabulary of another point under ``root`` trained on the same data into
    a new ``workdir``; returns whether it did.

    The paper trains one vocabulary for all its variants; sharing it also saves each point
    the vocabulary's training. A point that has one (or started without) keeps its own.
    """
    target = workdir / layout.VOCAB / layout.VOCAB_MODEL
    if target.exists() or (workdir / layout.CHECKPOINTS).exists():
        return False
    wanted = {k: config.data[k] for k in VOCAB_FIELDS}
    for other in sorted(root.iterdir()):
        source = other / layout.VOCAB / layout.VOCAB_MODEL
        saved = workdirs.read_json(other / layout.CONFIG)
        if other == workdir or not source.exists() or not isinstance(saved, dict):
            continue
        if {k: saved.get("data", {}).get(k) for k in VOCAB_FIELDS} == wanted:
            target.parent.mkdir(parents=True, exist_ok=True)
            storage.write_atomically(target, source.read_bytes())
            logging.info("%s: vocabulary shared from %s", workdir.name, other.name)
            return True
    return False


def _shared_cpu_peak(configs: list[ml_collections.ConfigDict]) -> dict[str, float]:
    """On a CPU, one matmul probe of the machine's peak FLOP/s (for MFU) for all points,
    instead of one per point: {"train.peak_flops": ...}, or {} when not needed."""
    if any(c.train.peak_flops or c.model.dtype != "float32" for c in configs):
        return {}
    import jax

    from transformer_jax.training import hardware

    if jax.default_backend() != "cpu":
        return {}
    peak = hardware.matmul_probe()
    logging.info("CPU peak for MFU, measured once for every point: %.1f GFLOP/s", peak / 1e9)
    return {"train.peak_flops": float(f"{peak:.4g}")}


def _submit_slurm(cmd: list[str], workdir: storage.Path, header: dict[str, Any]) -> str:
    workdir.mkdir(parents=True, exist_ok=True)  # SLURM writes its output file there
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except OSError as e:
        raise UserError(f"cannot run sbatch: {e.strerror or e}") from e
    if out.returncode != 0:
        logging.error("%s: sbatch failed: %s", header["point"], out.stderr.strip())
        return f"failed (sbatch exit {out.returncode})"
    job_id = out.stdout.strip().split(";")[0]
    workdirs.record_attempt(workdir, header,
                            {"started": workdirs.now(), "job_id": job_id, "command": cmd})
    logging.info("%s: submitted SLURM job %s", header["point"], job_id)
    return f"submitted (job {job_id})"


# ----------------------------------------------------------------------------------------
# Where a sweep stands


def _running(workdir: storage.PathLike) -> bool:
    """Whether a run holds the workdir now (workdirs.Hold): a live process on this host, or
    a heartbeat of the last few minutes from another."""
    hold = workdirs.read_hold(workdir)
    return hold is not None and workdirs.hold_is_live(hold)


def point_progress(workdir: storage.Path, num_steps: int, squeue: Callable[[str], str | None] | None
                   ) -> dict[str, Any]:
    """Where one point stands: ``state`` (not started, running, queued, finished, failed,
    stopped), its last logged step, loss and tokens/s, the seconds left at its last speed,
    and the last error line of a failed point."""
    record = workdirs.read_json(workdir / layout.SWEEP_POINT) or {}
    last_attempt = (record.get("attempts") or [{}])[-1]
    status = workdirs.point_status(workdir, num_steps)
    log = workdirs.last_train_record(workdir) or {}
    step = log.get("step")
    state = status.kind
    if state != "finished":
        job = last_attempt.get("job_id")
        slurm = squeue(job) if job and squeue else None
        if slurm:
            state = f"{slurm.lower()} under SLURM (job {job})"
        elif _running(workdir):
            state = "running"
        elif state == "missing":
            state = "not started"
        elif state == "unfinished":
            state = "stopped"
    speed = log.get("steps_per_s")
    left = (num_steps - step) / speed if speed and step is not None and \
        state == "running" else None
    return {"state": state, "step": step, "num_steps": num_steps, "loss": log.get("loss"),
            "tokens_per_s": log.get("tokens_per_s"), "seconds_left": left,
            "error": workdirs.last_error(workdir) if state == "failed" else "",
            "wall_s": sum(a.get("wall_s", 0.0) for a in record.get("attempts", []))}


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"


def status_lines(sweep: Sweep, root: str, scale: str = "paper",
                 overrides: dict[str, Any] | None = None,
                 squeue: Callable[[str], str | None] | None = slurm_job_state) -> list[str]:
    """One line per point (state, last step, loss, tokens/s, time left or the last error
    line), then the sweep's totals."""
    points = sweep.points()
    rows = []
    for point in points:
        config = point_config(sweep, point, scale, overrides)[0]
        rows.append((point, point_progress(storage.path(root) / point.name, config.train.num_steps,
                                           squeue)))
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


# ----------------------------------------------------------------------------------------
# The command


def summary(outcome: dict[str, str]) -> str:
    return ", ".join(f"{name}: {result}" for name, result in outcome.items())
