"""Sweeps: one training run per point of an experiment, each in its own workdir, run here,
printed, or submitted to SLURM or a Cloud TPU pod slice.

    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads \
        [--launcher=local|print|slurm|tpu] [--scale=demo] [--parallel=K] [--dry_run] \
        [--config.FIELD=VALUE ...]

An experiment file defines ``get_sweep(arg) -> Sweep``: a config file (``configs/table3.py``),
the swept quantity's name and one :class:`Point` per value, each naming a variant of the
config (``A_h4``) and any overrides. Point ``p`` trains in ``ROOT/p`` with the ordinary
command ``python -m transformer_jax.main --config=CONFIG:VARIANT --workdir=ROOT/p
--config.FIELD=VALUE ...``, the overrides being every field where the point's config differs
from the config file's own.

Re-running a sweep is safe: a finished point (``final_metrics.json`` at the config's last
step) is skipped and an unfinished one is started again, which resumes from its latest
checkpoint. ``ROOT/sweep.json`` records the sweep for ``python -m transformer_jax.compare
ROOT``; ``ROOT/POINT/sweep_point.json`` records each attempt (command, start, wall and CPU
seconds, exit status, SLURM job id).

``--scale=demo`` shrinks every point to CPU size on the built-in corpus (:func:`scale_to_demo`).
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
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ml_collections
from absl import flags
from ml_collections import config_flags

from transformer_jax import cli, config as config_lib, workdirs
from transformer_jax.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = ("local", "print", "slurm", "tpu")
SCALES = ("paper", "demo")
# Sentences decoded for BLEU at the end of each point: newstest2013 has 3,000, which the
# paper's Table 3 scores in full; at demo scale a few hundred keep the sweep within minutes.
BLEU_SENTENCES = {"paper": 3000, "demo": 300}


@dataclasses.dataclass(frozen=True)
class Point:
    """One training run: a named variant of the sweep's config file, at one swept value.

    ``overrides`` maps dotted config fields to values ({"train.num_steps": 1000});
    ``name`` (default: the variant) names the workdir under the sweep's root.
    """

    variant: str
    value: Any
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.variant


@dataclasses.dataclass(frozen=True)
class Sweep:
    """An experiment: points over one swept quantity, on one config file.

    ``overrides`` apply to every point, ``demo_overrides`` to every point at scale "demo"
    (after the scaling rule).
    """

    name: str
    config: str
    parameter: str
    points: tuple[Point, ...]
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    demo_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""


# ----------------------------------------------------------------------------------------
# Experiments and the configs of their points


def _load_module(path: Path, kind: str) -> Any:
    if not path.is_file():
        raise UserError(f"no {kind} file {path}")
    spec = importlib.util.spec_from_file_location(f"_{kind}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_experiment(spec: str) -> Sweep:
    """The sweep of ``"experiments/FILE.py[:ARG]"`` (``get_sweep(ARG)``)."""
    path, _, arg = spec.partition(":")
    module = _load_module(Path(path), "experiment")
    if not hasattr(module, "get_sweep"):
        raise UserError(f"{path}: an experiment file defines get_sweep(arg) -> Sweep")
    sweep = module.get_sweep(arg or None)
    labels = [p.label for p in sweep.points]
    duplicates = sorted({x for x in labels if labels.count(x) > 1})
    if duplicates:
        raise UserError(f"{spec}: point names must be unique; repeated: {', '.join(duplicates)}")
    return sweep


@functools.cache
def _config_module(path: str) -> Any:
    return _load_module(Path(path), "config")


def config_arg(point: Point, scale: str) -> str:
    """The config file's argument for a point: ``VARIANT`` or ``VARIANT,dataset=builtin``."""
    return point.variant + (",dataset=builtin" if scale == "demo" else "")


def scale_to_demo(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Shrinks a config to the CPU demo's size (configs/demo.py), keeping the variant's
    ratios to the base model.

    Data, batches, schedule and evaluation become the demo's. Each model dimension is the
    variant's times the demo's ratio to the base model (d_model and d_k, d_v: 128/512;
    d_ff: 512/2048; layers: 3/6), and so is the number of steps (450/100K): C_d1024 becomes
    d_model 256 with d_k 32, C_N2 one layer, big d_model 256 and d_ff 1,024 for 1,350 steps.
    The number of heads is the variant's, so row A keeps h * d_k = d_model: at d_model 128,
    h = 1, 4, 8, 16, 32 have d_k = 128, 32, 16, 8, 4.
    """
    shrink = _config_module(str(REPO / "configs" / "demo.py")).shrink
    paper, demo = config_lib.base_config(), shrink(config_lib.base_config())
    m, steps = c.model.to_dict(), c.train.num_steps

    def scaled(value: int, field: str) -> int:
        return max(1, round(value * demo.model[field] / paper.model[field]))

    shrink(c)
    c.model.num_layers = scaled(m["num_layers"], "num_layers")
    c.model.d_model = scaled(m["d_model"], "d_model")
    c.model.d_ff = scaled(m["d_ff"], "d_ff")
    c.model.num_heads = m["num_heads"]
    for field in ("d_k", "d_v"):  # 0 stays 0: derived as d_model // num_heads
        c.model[field] = scaled(m[field], "d_model") if m[field] else 0
    c.train.num_steps = max(1, round(steps * demo.train.num_steps / paper.train.num_steps))
    return c


def set_field(c: ml_collections.ConfigDict, path: str, value: Any) -> None:
    """``c.a.b = value`` for ``path="a.b"``; ConfigError naming an unknown field."""
    *parents, leaf = path.split(".")
    node = c
    for part in parents:
        if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
            raise ConfigError(f"unknown config field {path}")
        node = node[part]
    if leaf not in node:
        raise ConfigError(f"unknown config field {path}")
    try:
        node[leaf] = value
    except TypeError as e:
        raise ConfigError(f"{path}={value!r}: {e}") from e


def point_config(sweep: Sweep, point: Point, scale: str = "paper",
                 overrides: dict[str, Any] | None = None
                 ) -> tuple[ml_collections.ConfigDict, ml_collections.ConfigDict]:
    """(the point's config, the config file's own config for the point's variant).

    In order: the variant, the demo scaling, end-of-run BLEU settings, the sweep's overrides,
    the point's, then ``overrides`` (from the command line). Raises ConfigError naming the
    point.
    """
    try:
        own = _config_module(sweep.config).get_config(config_arg(point, scale))
        c = ml_collections.ConfigDict(own.to_dict())
        if scale == "demo":
            scale_to_demo(c)
        layers = [bleu_settings(scale), sweep.overrides,
                  sweep.demo_overrides if scale == "demo" else {}, point.overrides,
                  overrides or {}]
        for layer in layers:
            for path, value in layer.items():
                set_field(c, path, value)
        if not any("train.bleu_every" in layer for layer in layers):
            # Validation BLEU once, at the last step (known only now, after the overrides).
            c.train.bleu_every = c.train.num_steps if c.train.bleu_sentences else 0
        c.train.visualize_sentences = ()  # sweeps draw no pictures
        config_lib.validate(c)
    except UserError as e:
        raise ConfigError(f"point {point.label}: {e}") from e
    return c, own


def bleu_settings(scale: str) -> dict[str, Any]:
    """End-of-run BLEU of the test split's first sentences, and no samples. At the demo scale
    greedy, as in the demo: beam search would add minutes a point on a CPU."""
    settings = {"train.bleu_sentences": BLEU_SENTENCES[scale], "train.samples": 0}
    if scale == "demo":
        settings["decode.strategy"] = "greedy"
    return settings


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
    return (f"{sweep.config}:{config_arg(point, scale)}", os.path.join(root, point.label),
            config_overrides(config, own))


def command(launcher: str, sweep: Sweep, point: Point, args: tuple[str, str, list[str]],
            python: str = "python") -> list[str]:
    """The command that trains one point with ``launcher``."""
    config, workdir, overrides = args
    if launcher == "slurm":
        return ["sbatch", "--parsable", f"--job-name={sweep.name}-{point.label}",
                f"--output={workdir}/slurm-%j.out", "launch/slurm.sbatch", config, workdir,
                *overrides]
    if launcher == "tpu":
        return ["launch/tpu_pod.sh", config, workdir, *overrides]
    return [python, "-m", "transformer_jax.main", f"--config={config}", f"--workdir={workdir}",
            *overrides]


# ----------------------------------------------------------------------------------------
# Running a sweep


def slurm_job_active(job_id: str) -> bool:
    """Whether SLURM still has the job queued or running (False without squeue)."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def _check_root(root: Path, definition: dict[str, Any]) -> None:
    old = workdirs.read_json(root / "sweep.json")
    if old and (old.get("name"), old.get("scale")) != (definition["name"],
                                                       definition["scale"]):
        raise UserError(f"{root} holds the sweep {old.get('name')} at scale {old.get('scale')}"
                        f"; run {definition['name']} at scale {definition['scale']} under "
                        "another --root")


def _check_workdir_model(workdir: Path, config: ml_collections.ConfigDict, label: str) -> None:
    """A workdir trained with another model or data cannot resume this point."""
    saved = workdirs.read_json(workdir / "config.json")
    if not isinstance(saved, dict) or not (workdir / "checkpoints").exists():
        return
    conflicts = workdirs.resume_conflicts(saved, config.to_dict())
    if conflicts:
        raise UserError(f"point {label}: {workdir}/config.json differs from the sweep's "
                        f"config: {'; '.join(conflicts)}; use another --root or remove the "
                        "workdir")


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
    if scale not in SCALES:
        raise UserError(f"--scale={scale} is not one of {', '.join(SCALES)}")
    if parallel < 1:
        raise UserError(f"--parallel={parallel} must be >= 1")
    if launcher == "tpu" and parallel > 1:
        raise UserError("--launcher=tpu runs one point at a time on the pod slice; "
                        "use --parallel=1")
    configs = {p.label: point_config(sweep, p, scale, overrides) for p in sweep.points}
    root_path = Path(root)
    definition = {
        "name": sweep.name, "experiment": experiment, "config": sweep.config,
        "parameter": sweep.parameter, "scale": scale, "description": sweep.description,
        "points": [{"name": p.label, "variant": p.variant, "value": p.value,
                    "config": configs[p.label][0].to_dict()} for p in sweep.points]}
    _check_root(root_path, definition)
    if not dry_run:
        root_path.mkdir(parents=True, exist_ok=True)
        (root_path / "sweep.json").write_text(json.dumps(definition, indent=2))

    outcome, todo = {}, []
    squeue = slurm_job_active if launcher == "slurm" else None
    for point in sweep.points:
        config = configs[point.label][0]
        status = workdirs.point_status(root_path / point.label, config.train.num_steps, squeue)
        if status.kind in ("finished", "queued"):
            outcome[point.label] = f"skipped: {status}"
            logging.info("%s: %s, skipped", point.label, status)
            if launcher == "print":
                print(f"# {point.label}: {status}")
            continue
        _check_workdir_model(root_path / point.label, config, point.label)
        todo.append((point, status))
    if launcher == "local" and todo and not dry_run:
        peak = _shared_cpu_peak([configs[p.label][0] for p, _ in todo])
        configs.update({p.label: point_config(sweep, p, scale, {**(overrides or {}), **peak})
                        for p, _ in todo})

    pending = []
    for point, status in todo:
        config, own = configs[point.label]
        cmd = command(launcher if launcher != "print" else "local", sweep, point,
                      train_args(sweep, point, scale, config, own, root),
                      python if launcher == "local" else "python")
        if launcher == "print":
            print(shlex.join(cmd))
        elif dry_run:
            print(f"# {point.label} ({status}):\n{shlex.join(cmd)}")
        else:
            pending.append((point, root_path / point.label, cmd, config))
            continue
        outcome[point.label] = "printed"
    if not pending:
        return outcome
    header = functools.partial(_header, sweep, launcher=launcher)
    if launcher == "slurm":
        for point, workdir, cmd, _ in pending:
            outcome[point.label] = _submit_slurm(cmd, workdir, header(point))
    else:
        run = functools.partial(_run_here, total=len(pending), header=header, root=root_path)
        workers = parallel if launcher == "local" else 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run, i, *item): item[0].label
                       for i, item in enumerate(pending)}
            for future in concurrent.futures.as_completed(futures):
                outcome[futures[future]] = future.result()
    return outcome


def _header(sweep: Sweep, point: Point, launcher: str) -> dict[str, Any]:
    return {"sweep": sweep.name, "point": point.label, "variant": point.variant,
            "value": point.value, "launcher": launcher}


def _run_here(index: int, point: Point, workdir: Path, cmd: list[str],
              config: ml_collections.ConfigDict, *, total: int,
              header: Callable[[Point], dict], root: Path) -> str:
    """Runs one point's command here, its output appended to ``WORKDIR/train.log`` (the
    TPU launcher's goes to the console, its workdir being on the workers' storage)."""
    local = cmd[0] != "launch/tpu_pod.sh"
    logging.info("[%d/%d] %s: %s", index + 1, total, point.label, shlex.join(cmd))
    if local:
        workdir.mkdir(parents=True, exist_ok=True)
        share_vocabulary(root, workdir, config)
    start, started = time.time(), workdirs.now()
    with open(workdir / "train.log", "a") if local else open(os.devnull, "w") as log:  # noqa: SIM115
        proc = subprocess.Popen(cmd, stdout=log if local else None,
                                stderr=subprocess.STDOUT if local else None)
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


def share_vocabulary(root: Path, workdir: Path, config: ml_collections.ConfigDict) -> bool:
    """Copies the vocabulary of another point under ``root`` trained on the same data into
    a new ``workdir``; returns whether it did.

    The paper trains one vocabulary for all its variants; sharing it also saves each point
    the vocabulary's training. A point that has one (or started without) keeps its own.
    """
    target = workdir / "vocab" / "spm.model"
    if target.exists() or (workdir / "checkpoints").exists():
        return False
    wanted = {k: config.data[k] for k in VOCAB_FIELDS}
    for other in sorted(root.iterdir()):
        source = other / "vocab" / "spm.model"
        saved = workdirs.read_json(other / "config.json")
        if other == workdir or not source.exists() or not isinstance(saved, dict):
            continue
        if {k: saved.get("data", {}).get(k) for k in VOCAB_FIELDS} == wanted:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(".tmp")
            shutil.copyfile(source, tmp)
            tmp.replace(target)
            logging.info("%s: vocabulary shared from %s", workdir.name, other.name)
            return True
    return False


def _shared_cpu_peak(configs: list[ml_collections.ConfigDict]) -> dict[str, float]:
    """On a CPU, one matmul probe of the machine's peak FLOP/s (for MFU) for all points,
    instead of one per point: {"train.peak_flops": ...}, or {} when not needed."""
    if any(c.train.peak_flops or c.model.dtype != "float32" for c in configs):
        return {}
    import jax

    from transformer_jax import hardware

    if jax.default_backend() != "cpu":
        return {}
    peak = hardware.matmul_probe()
    logging.info("CPU peak for MFU, measured once for every point: %.1f GFLOP/s", peak / 1e9)
    return {"train.peak_flops": float(f"{peak:.4g}")}


def _submit_slurm(cmd: list[str], workdir: Path, header: dict[str, Any]) -> str:
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
# The command


def _summary(outcome: dict[str, str]) -> str:
    return ", ".join(f"{name}: {result}" for name, result in outcome.items())


def main(argv: Sequence[str], flag_values: Any) -> None:
    with cli.clean_errors():
        if len(argv) != 2:
            raise UserError("give one experiment file, e.g. "
                            "python -m transformer_jax.sweep experiments/heads_ablation.py "
                            "--root=runs/heads")
        f = flag_values
        sweep = load_experiment(argv[1])
        outcome = run_sweep(sweep, f.root, f.launcher, f.scale, f.parallel, f.dry_run,
                            config_flags.get_override_values(flags.FLAGS["config"]),
                            experiment=argv[1])
        logging.info("%s: %s", sweep.name, _summary(outcome))
        if any(r.startswith("failed") for r in outcome.values()):
            sys.exit(1)


if __name__ == "__main__":
    flags.DEFINE_string("root", None, "Directory of the sweep: one workdir per point.")
    flags.mark_flag_as_required("root")
    flags.DEFINE_enum("launcher", "local", LAUNCHERS,
                      "local: run here; print: write the commands; slurm: sbatch each point; "
                      "tpu: launch/tpu_pod.sh each point, in turn.")
    flags.DEFINE_enum("scale", "paper", SCALES,
                      "demo: every point shrunk to CPU size on the built-in corpus.")
    flags.DEFINE_integer("parallel", 1, "Points run at once by --launcher=local.")
    flags.DEFINE_bool("dry_run", False, "Show what would be run; change nothing.")
    config_flags.DEFINE_config_dict("config", config_lib.base_config(),
                                    "Overrides for every point, e.g. --config.train.seed=1.")
    cli.run(functools.partial(main, flag_values=flags.FLAGS))
