"""The settings a workdir was trained with: read back for the commands that use a trained
model, checked when a run resumes (what may change and what may not), and recorded."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ml_collections import ConfigDict

from transformer_jax import config as config_lib
from transformer_jax.config.fields import INEXACT, inexact_float
from transformer_jax.errors import UserError, shown
from transformer_jax.io import layout, storage, strict_json, workdirs
from transformer_jax.io.workdirs import now, read_config
from transformer_jax.model import kernels

# Settings that cannot change when a run resumes: every model and data field (the
# parameters' shapes, the vocabulary, the batches and the data position saved with each
# checkpoint), and the accumulation steps (the rows of each micro-batch follow them, and the
# data position is saved in micro-batches of those rows). Everything else
# (train.num_steps, train.parallel, the intervals, decode.*, optim.warmup_steps...) may
# change; the changes are recorded in config_changes.jsonl.
FIXED_SECTIONS = ("model", "data")
FIXED_FIELDS = ("optim.grad_accum_steps",)
# Model fields that compute the same numbers another way: they may change.
FREE_MODEL_FIELDS = ("model.block_size", "model.remat")
# The state of optax.MultiSteps, which accumulated gradients before the train step summed a
# step's micro-batches itself: its running sum, saved with every checkpoint of such a run.
MULTISTEPS_LEAVES = "opt_state/acc_grads/"
# Data fields that read the same ids from elsewhere (the token cache): they may change.
FREE_DATA_FIELDS = ("data.token_cache", "data.token_cache_dir", "data.token_cache_wait_s")
# The key of a checkpoint's meta that records the model section it was trained with
# (model_record), against which config.json is read back (check_recorded_model).
MODEL_RECORD = "model"


def workdir_config(workdir: str | os.PathLike, overrides: Mapping[str, Any] | None = None,
                   allowed: Sequence[str] = ()) -> ConfigDict:
    """The config saved in ``<workdir>/config.json`` (with the changes of later resumes,
    ``workdirs.read_config``), with ``overrides`` ({"decode.alpha": 1.0}, from
    :func:`override_values`) applied and validated.

    ``allowed`` lists the fields (or whole sections, e.g. "decode") a command lets the user
    change; the model and its training come from the workdir. Raises UserError naming the
    file (missing or damaged) or the field.
    """
    path = storage.path(workdir) / layout.CONFIG
    saved = workdirs.read_config(workdir)
    if saved is None:
        raise UserError(f"{path}: no such file; --workdir must be the workdir of a training "
                        "run")
    config = config_from_dict(saved, str(path))
    for field, value in (overrides or {}).items():
        if not any(field == a or field.startswith(a + ".") for a in allowed):
            names = ", ".join(f"--config.{a}" + ("" if "." in a else ".*") for a in allowed)
            raise UserError(f"--config.{field}: only {names} may be set here; the rest comes "
                            f"from {path}")
        config_lib.apply_overrides(config, {field: value})
    return config_lib.validate(config)


def config_from_dict(saved: dict[str, Any], origin: str) -> ConfigDict:
    """The config of ``saved`` (sections of fields, as in a config.json): the base config
    with its values set (fields added since it was written keep their defaults; those this
    version lacks are left out with a warning), validated. UserError naming ``origin`` (the
    file) and the field that does not fit."""
    config = config_lib.base_config()
    unknown: list[str] = []
    _merge(config, saved, origin, unknown=unknown)
    if unknown:
        logging.warning("warning: %s: ignored field(s) this version does not have: %s", origin,
                        ", ".join(unknown[:10]) + (", ..." if len(unknown) > 10 else ""))
    try:
        return config_lib.validate(config)
    except UserError as e:
        raise UserError(f"{origin}: {e}") from None


def _merge(config: ConfigDict, values: dict[str, Any], origin: str, prefix: str = "",
           unknown: list[str] | None = None) -> None:
    """Sets the fields of ``config`` to ``values`` (nested dicts, as in config.json).

    A section must be an object and a field a value (UserError naming ``origin`` and the
    field); the names ``config`` lacks are listed in ``unknown`` and left out."""
    for key, value in values.items():
        if key not in config:
            if unknown is not None:
                unknown.append(shown(f"{prefix}{key}"))
            continue
        if isinstance(config[key], ConfigDict):
            if not isinstance(value, dict):
                raise UserError(f"{origin}: {shown(prefix + key)} is {str(value)[:40]!r}, "
                                "not an object of fields")
            _merge(config[key], value, origin, f"{prefix}{key}.", unknown)
            continue
        if isinstance(value, dict):
            raise UserError(f"{origin}: {shown(prefix + key)} is an object, not a value")
        if inexact_float(config[key], value):
            raise UserError(f"{origin}: {shown(prefix + key)}={str(value)[:40]} {INEXACT}")
        try:
            config[key] = value
        except (TypeError, ValueError) as e:
            raise UserError(f"{origin}: {shown(prefix + key)}={str(value)[:40]!r} is not of the "
                            f"field's type ({type(config[key]).__name__})") from e


def config_changes(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{"section.field": (saved value, new value)} of every field of ``new``'s sections that
    differs; a field ``saved`` lacks (added since) counts as its default. Values are
    compared as JSON (tuples as lists)."""
    defaults = _plain(config_lib.base_config().to_dict())
    saved, new = _plain(saved), _plain(new)
    out = {}
    for section, fields in new.items():
        if not isinstance(fields, dict):
            continue
        had = saved.get(section) if isinstance(saved.get(section), dict) else {}
        for key, value in fields.items():
            old = had.get(key, defaults.get(section, {}).get(key, value))
            if old != value:
                out[f"{section}.{key}"] = (old, value)
    return out


def resume_conflicts(saved: dict[str, Any], new: dict[str, Any],
                     there: str = "in the workdir", here: str = "asked") -> list[str]:
    """The changes from the ``saved`` config to the ``new`` one (dicts of sections, as in
    config.json) that a resumed run cannot take, one string each naming the field and both
    values: "model.d_model: 512 in the workdir, 256 asked" (``there``, ``here``). Empty when
    ``new`` may resume ``saved``; the fields it checks are ``FIXED_SECTIONS`` and
    ``FIXED_FIELDS``."""
    out = []
    for field, (old, value) in config_changes(saved, new).items():
        if field.split(".")[0] not in FIXED_SECTIONS and field not in FIXED_FIELDS:
            continue
        # Kernels of the same function (the paper's softmax attention over every key, the
        # ``exact`` trait) may replace each other; "local" attends to fewer keys and may not.
        if field in FREE_MODEL_FIELDS + FREE_DATA_FIELDS or (
                field == "model.attention" and {old, value} <= set(kernels.having("exact"))):
            continue
        out.append(f"{field}: {old!r} {there}, {value!r} {here}")
    return out


def fixed_settings(config: ConfigDict) -> dict[str, Any]:
    """The settings of ``config`` a resumed run cannot change (FIXED_SECTIONS and
    FIXED_FIELDS, in the config's order), as :func:`resume_conflicts` compares them: what a
    sweep checks a point's workdir against."""
    out: dict[str, Any] = {}
    for section, fields in config.to_dict().items():
        if not isinstance(fields, dict):
            continue
        kept = {k: v for k, v in fields.items()
                if section in FIXED_SECTIONS or f"{section}.{k}" in FIXED_FIELDS}
        if kept:
            out[section] = kept
    return out


def model_record(config: ConfigDict) -> dict[str, Any]:
    """The model section of ``config`` as a checkpoint records it (MODEL_RECORD)."""
    return _plain(config.model.to_dict())


def check_recorded_model(recorded: Any, model: dict[str, Any], checkpoint: str,
                         config_path: str) -> None:
    """UserError when ``model`` (the model section of config.json as read back) is not the
    model ``recorded`` by ``checkpoint`` (its MODEL_RECORD; None, a checkpoint written before
    it was recorded: nothing to compare), by the rule of a resume: config.json was edited,
    and a model of the same shapes but other computation (pre-LN, other positions, another
    kernel) would restore without a word."""
    if recorded is None:
        return
    if not isinstance(recorded, dict):
        raise UserError(f"checkpoint metadata {checkpoint}: {MODEL_RECORD}="
                        f"{shown(str(recorded))[:40]!r} is not an object of fields; the "
                        "checkpoint is damaged")
    edits = resume_conflicts({"model": recorded}, {"model": model},
                             there="in the checkpoint", here="in config.json")
    if edits:
        raise UserError(f"{config_path} describes another model than checkpoint {checkpoint} "
                        f"was trained with: {'; '.join(edits)} (an edited config.json? "
                        "restore it)")


def recorded_model(workdir: storage.Path) -> tuple[Any, str] | None:
    """(the model the newest checkpoint of ``workdir`` whose metadata reads recorded, that
    checkpoint) read from the metadata file alone, or None without checkpoints (a damaged
    metadata file is skipped: the resume sets that checkpoint aside)."""
    for step in reversed(workdirs.checkpoint_steps_on_disk(workdir)):
        where = workdir / layout.CHECKPOINTS / str(step)
        try:
            meta = strict_json.read(where / layout.CHECKPOINT_META, nan=True)
        except strict_json.Damaged:
            continue
        if meta is not None:
            return meta.get(MODEL_RECORD), str(where)
    return None


def remember_config(workdir: str | os.PathLike, new: dict[str, Any], resuming: bool,
                    write: bool = True) -> dict[str, tuple[Any, Any]]:
    """Checks the config ``new`` of a training run against the workdir's and records it.

    A new run (``resuming`` False: no checkpoint and no vocabulary in the workdir) writes
    ``config.json``, as does a run resuming a workdir without one. A resumed run whose
    config.json is damaged, or with :func:`resume_conflicts` is refused in one
    UserError; without a checkpoint only the data fields must match (the vocabulary). Its
    other changes are appended to ``config_changes.jsonl`` (config.json stays the original)
    and returned. ``write`` False (processes other than 0) checks only.
    """
    workdir = storage.path(workdir)
    saved = read_config(workdir) if resuming else None  # a new run replaces any config.json
    if saved is None:
        if write:
            storage.write_atomically(workdir / layout.CONFIG, json.dumps(new, indent=2))
            (workdir / layout.CONFIG_CHANGES).unlink(missing_ok=True)
        return {}
    refuse_micro_batch_checkpoints(workdir, saved)
    recorded = recorded_model(workdir)
    if recorded is not None and isinstance(saved.get("model"), dict):
        check_recorded_model(recorded[0], saved["model"], recorded[1],
                             str(workdir / layout.CONFIG))
    conflicts = resume_conflicts(saved, new)
    if not workdirs.checkpoint_steps_on_disk(workdir):
        conflicts = [c for c in conflicts if c.startswith("data.")]
    if conflicts:
        raise UserError(f"{workdir} was trained with other settings: {'; '.join(conflicts)}; "
                        "resume with the workdir's values or train in another --workdir")
    changes = config_changes(saved, new)
    if changes and write:
        storage.append_line(workdir / layout.CONFIG_CHANGES, json.dumps(
            {"time": now(), "changes": {k: list(v) for k, v in changes.items()}}))
        logging.info("settings changed since the last run of %s: %s", workdir, ", ".join(
            f"{k} {old!r} -> {value!r}" for k, (old, value) in changes.items()))
    return changes


def refuse_micro_batch_checkpoints(workdir: storage.Path, saved: dict[str, Any]) -> None:
    """Raises UserError, in one line, if the workdir's newest readable checkpoint was written
    by an accumulating run (``optim.grad_accum_steps`` > 1 in its config.json) of a version
    before the train step summed micro-batches itself: those numbered checkpoints in
    micro-batches and saved ``optax.MultiSteps``'s state (``MULTISTEPS_LEAVES``), which this
    version neither restores nor counts alike. The fact is read from the checkpoint's own
    metadata (no array is read). Runs without accumulation wrote what this version writes,
    and resume."""
    optim = saved.get("optim") if isinstance(saved.get("optim"), dict) else {}
    accum = optim.get("grad_accum_steps", 1)
    steps = workdirs.checkpoint_steps_on_disk(workdir)
    if not isinstance(accum, int) or accum <= 1 or not steps:
        return
    from transformer_jax.io import checkpoints  # orbax and JAX, only for such a workdir

    for step in reversed(steps):  # the newest whose metadata reads (a damaged one is skipped)
        shapes = checkpoints.saved_shapes(workdir / layout.CHECKPOINTS / str(step))
        if shapes is None:
            continue
        if any(path.startswith(MULTISTEPS_LEAVES) for path in shapes):
            raise UserError(
                f"{workdir}: checkpoint {step} was written by an older version that numbered "
                f"checkpoints in micro-batches ({step} = {step / accum:g} optimizer steps of "
                f"optim.grad_accum_steps={accum}) and saved optax.MultiSteps's state; this "
                "version counts optimizer steps and cannot resume it: train in a new "
                "--workdir (evaluate and translate still read its checkpoints)")
        return


def _plain(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists)."""
    return json.loads(json.dumps(value, default=str))
