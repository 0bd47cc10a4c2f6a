"""Checkpoints in the workdir with orbax: train state, data-loader position and metadata.

Each checkpoint ``<workdir>/checkpoints/<step>/`` holds three items:

* ``state`` -- params, optimizer state and step (a pytree);
* ``data``  -- the grain iterator's position, one file per process;
* ``meta``  -- JSON: the vocabulary size, anything the run wants to remember, and a checksum
  of every array of the state.

What a fault can and cannot do to them:

* orbax writes a checkpoint under ``<step>.orbax-checkpoint-tmp`` and renames it to
  ``<step>`` once every item is written, so a process killed while saving leaves only the
  temporary directory, which the manager does not list (and replaces when that step is
  saved again). Old checkpoints beyond ``keep`` are first renamed into ``deleting/`` and only
  then removed, so a kill during the removal cannot leave half a ``<step>`` directory either.
* A save that fails (a full disk: DiskFull) is reported in one line naming the directory
  and orbax's reason, its temporary directory removed; one that has not finished after
  ``timeout_s`` (a stalled disk), or ``stalls.SIGNAL_GRACE_S`` after a stop signal, raises
  WriteStalled (``stalls.within``). Either way the checkpoints before it are untouched.
* No checkpoint holds NaN or Inf: :meth:`Checkpoints.save` refuses such a state.
* A checkpoint damaged on disk (a truncated or overwritten file, a missing item) fails to
  restore, or restores arrays that do not match their checksums; :meth:`restore_latest`
  reports it in one line, moves it aside to ``<step>.corrupt-<n>`` (a name orbax ignores;
  nothing is deleted) and falls back to the previous checkpoint. The checksums and the
  checks of the meta item are ``checkpoint_integrity.py``'s.

:meth:`Checkpoints.average_params` averages the parameters of the last N checkpoints, as the
paper does before evaluating (the last 5 for the base model, 20 for the big one);
:meth:`Checkpoints.average_last` averages as many of them as the workdir holds, and
:func:`early_span` says when the averaged checkpoints reach back into early training.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax.errors import DiskFull, TrainingStopped, UserError, WriteStalled
from transformer_jax.io import bucket_retries, late_reads, layout, quiet, stalls, storage
from transformer_jax.io.checkpoint_integrity import (
    CHECKSUMS,
    CorruptCheckpoint,
    check_meta,
    integrity,
    shapes,
    verify,
)
from transformer_jax.io.orbax_messages import SaveErrors

# The paper's windows end its runs: base averages steps 94,000-100,000 (5 checkpoints 1,500
# steps apart), big 288,600-300,000 (20, 600 apart), both after 94% of training, when the
# parameters barely move between checkpoints. A window reaching back before 90% of its newest
# step averages a model that was still changing fast (the demo's 150, 300, 450 lost 18 BLEU).
EARLY_FRACTION = 0.9

# orbax's warning when a checkpoint's item directory ("state"), read on its own for its
# metadata, lacks the metadata file it looks for there: that file is the step's, one level up.
ITEM_METADATA = "Metadata file does not exist"

TRASH = "deleting"  # old checkpoints are renamed into this subdirectory, then removed
UNFINISHED = ".orbax-checkpoint-tmp"  # orbax writes checkpoint <step> as <step><UNFINISHED>

bucket_retries.configure_tensorstore()  # a bucket's failed requests retried as gcsfs does


class Checkpoints:
    """The checkpoints of one workdir."""

    def __init__(self, workdir: storage.PathLike, keep: int, timeout_s: float = float("inf")):
        self.directory = storage.path(workdir) / layout.CHECKPOINTS
        self.timeout_s = timeout_s  # for a save to finish (train.write_timeout_s)
        self.interrupted: Callable[[], str | None] = lambda: None  # a stop signal's name
        self._stalled = False
        # orbax logs a failed save's traceback from its own thread: while a save is in
        # flight, kept for the one line that reports it (_finish_writing).
        self._save_errors = SaveErrors()
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 todelete_subdir=TRASH),
            item_names=("state", "data", "meta"),
        )
        self._writing: int | None = None  # the step of a save that may still be running
        late_reads.quiet()  # a damaged checkpoint's refusal stays one line

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, state: Any, data_iterator: Any | None, meta: dict[str, Any],
             force: bool = False) -> bool:
        """Saves (asynchronously); returns whether a checkpoint was started.

        Raises TrainingStopped, saving nothing, if the state holds NaN or Inf, and UserError
        if the previous save did not complete (a full disk, say).
        """
        checksums, finite = integrity(state)
        if not finite:
            raise TrainingStopped(
                f"the train state at step {step} holds NaN or Inf and was not saved; the last "
                f"checkpoint is {self.latest_step()}")
        self._finish_writing()
        items = {"state": ocp.args.StandardSave(state),
                 "meta": ocp.args.JsonSave({**meta, CHECKSUMS: checksums})}
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointSave(data_iterator)
        logging.getLogger("absl").addFilter(self._save_errors)
        try:
            started = self.manager.save(step, args=ocp.args.Composite(**items), force=force)
        except OSError as e:  # a file orbax or grain writes before the save goes on its own
            if not storage.out_of_space(e):  # (an OSError of a file's close names no path)
                raise
            raise self._unwritten(step, "No space left on device", DiskFull) from None
        if started:
            self._writing = step
        return started

    def _finish_writing(self) -> None:
        """Waits for the save in flight, checks that it became a checkpoint, and removes
        the checkpoints orbax retired. The wait ends (WriteStalled) at ``timeout_s``, or
        ``stalls.SIGNAL_GRACE_S`` after a stop signal (stalls.within)."""
        if self._stalled:
            return
        step = self._writing
        error: BaseException | None = None
        try:
            stalls.within(self.timeout_s, f"the write of checkpoint {step} to {self.directory}",
                          self.manager.wait_until_finished, self.interrupted)
        except WriteStalled:
            self._stalled = True
            raise
        except Exception as e:  # noqa: BLE001 -- whatever a failed write makes orbax raise
            error = e
        logging.getLogger("absl").removeFilter(self._save_errors)
        self._writing = None
        if step is not None and not (self.directory / str(step)).is_dir():
            errors = [*self._save_errors.take(), *([error] if error else [])]
            no_space = any(storage.full_disk(e, "") or "No space left on device" in str(e)
                           for e in errors)
            reason = ("No space left on device" if no_space else
                      _first_line(errors[0]) if errors else "no reason given")
            # The failed write leaves a coroutine of orbax's writer never awaited; Python
            # would report it at the exit, after the one line that says what happened.
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            raise self._unwritten(step, reason, DiskFull if no_space else UserError)
        self._save_errors.take()
        trash = self.directory / TRASH
        if jax.process_index() == 0 and trash.is_dir():
            for old in trash.iterdir():
                storage.rmtree(old)

    def _unwritten(self, step: int, reason: str, error: type[UserError]) -> UserError:
        """The one line of a save of ``step`` that failed for ``reason``, once what it left is
        removed (by process 0)."""
        if jax.process_index() == 0:
            for unfinished in self.directory.glob(f"{step}{UNFINISHED}*"):
                storage.rmtree(unfinished)
        return error(f"checkpoint {step} could not be written to {self.directory}: {reason}; "
                     "its unfinished copy was removed")

    def restore(self, step: int, state_template: Any,
                data_iterator: Any | None = None) -> tuple[Any, dict[str, Any]]:
        """Restores the state (shaped like ``state_template``) and, if given, moves
        ``data_iterator`` to the saved position. Returns (state, meta).

        Raises CorruptCheckpoint if the checkpoint does not restore whole (a missing or
        unreadable item, or arrays that do not match their checksums), and UserError if it
        was written for a model of another shape.
        """
        items = {"state": ocp.args.StandardRestore(_abstract(state_template)),
                 "meta": ocp.args.JsonRestore()}
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
        # orbax warns about each file a damaged checkpoint lacks; the damage is reported
        # once, in one line, by restore_latest.
        with quiet.Dropped():
            try:
                restored = self.manager.restore(step, args=ocp.args.Composite(**items))
                meta = dict(restored["meta"])
            except Exception as e:  # noqa: BLE001 -- whatever a damaged file makes orbax raise
                self._check_same_shapes(step, state_template)
                raise CorruptCheckpoint(_first_line(e)) from e
        check_meta(meta)
        verify(restored["state"], meta.pop(CHECKSUMS, None), require_finite=True)
        logging.info("restored checkpoint %s", self.directory / str(step))
        return restored["state"], meta

    def restore_latest(self, state_template: Any, data_iterator: Any | None = None
                       ) -> tuple[int, Any, dict[str, Any]] | None:
        """The newest checkpoint that restores whole: (step, state, meta), or None if none
        does. Each damaged checkpoint met on the way is reported in one line and moved aside
        to ``<step>.corrupt-<n>``."""
        for step in reversed(self.all_steps()):
            try:
                state, meta = self.restore(step, state_template, data_iterator)
            except CorruptCheckpoint as e:
                moved = self.set_aside(step)
                earlier = [s for s in self.all_steps() if s < step]
                logging.warning("checkpoint %d is damaged (%s): moved to %s, nothing deleted; %s",
                                step, e, moved, f"falling back to checkpoint {earlier[-1]}"
                                if earlier else "no earlier checkpoint, starting afresh")
                continue
            return step, state, meta
        return None

    def set_aside(self, step: int) -> storage.Path:
        """Renames checkpoint ``step`` to ``<step>.corrupt-<n>``, which orbax does not list,
        so the step can be written again. Returns the new path."""
        source = self.directory / str(step)
        n = 1
        while (self.directory / f"{step}.corrupt-{n}").exists():
            n += 1
        target = self.directory / f"{step}.corrupt-{n}"
        if jax.process_index() == 0:
            source.rename(target)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"set aside checkpoint {step}")
        self.manager.reload()
        return target

    def _check_same_shapes(self, step: int, state_template: Any) -> None:
        """Raises UserError if checkpoint ``step`` holds arrays of other shapes than the
        template (a workdir trained with another model); returns if it matches or its
        metadata is unreadable (then the checkpoint is damaged)."""
        saved = saved_shapes(self.directory / str(step))
        if saved is None:
            return
        wanted = shapes(state_template)
        for path in sorted(wanted.keys() & saved.keys()):
            if wanted[path] != saved[path]:
                raise UserError(
                    f"checkpoint {self.directory / str(step)} was written by another model: "
                    f"{path} has shape {saved[path]} there but {wanted[path]} in this config; "
                    "train it in a new --workdir")

    def restore_params(self, step: int, params_template: Any) -> Any:
        """Only the parameters of checkpoint ``step`` (for evaluation and decoding), shaped
        like ``params_template`` (arrays or ``jax.ShapeDtypeStruct``); host numpy arrays.
        Raises UserError if they do not match the checksums saved with them."""
        template = {"params": params_template}
        where = self.directory / str(step)
        self._check_params_fit(step, template)
        # Reading part of the state makes orbax warn about every item left unread.
        try:
            with (quiet.Dropped("was found in the checkpoint, but could not be restored"),
                  ocp.PyTreeCheckpointer() as reader):
                restored = reader.restore(
                    where / "state",
                    args=ocp.args.PyTreeRestore(
                        item=template, partial_restore=True,
                        restore_args=jax.tree.map(
                            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), template)))
        except Exception as e:  # noqa: BLE001 -- whatever a damaged file makes orbax raise
            raise UserError(f"checkpoint {where} is damaged: {_first_line(e)}") from e
        try:
            meta = self._read_meta(step)
            check_meta(meta)
            verify(restored, meta.get(CHECKSUMS))
        except CorruptCheckpoint as e:
            raise UserError(f"checkpoint {where} is damaged: {e}") from e
        return restored["params"]

    def _check_params_fit(self, step: int, template: Any) -> None:
        """UserError naming the checkpoint and a parameter when checkpoint ``step`` holds
        none of that name, or one of another shape, than ``template`` ({"params": ...}):
        the model of the config (an edited config.json) is not the one it trained."""
        where = self.directory / str(step)
        try:
            with quiet.Dropped(ITEM_METADATA), ocp.StandardCheckpointer() as reader:
                saved = shapes(reader.metadata(where / "state").item_metadata)
        except Exception as e:  # noqa: BLE001 -- unreadable metadata: a damaged checkpoint
            raise UserError(f"checkpoint {where} is damaged: {_first_line(e)}") from e
        for path, shape in sorted(shapes(template).items()):
            if path not in saved:
                raise UserError(f"checkpoint {where} holds no {path}: it is damaged, or was "
                                "written by another model than the config's (an edited "
                                "config.json?)")
            if saved[path] != shape:
                raise UserError(f"checkpoint {where} was written by another model: {path} has "
                                f"shape {saved[path]} there but {shape} in the config (an "
                                "edited config.json?)")

    def average_params(self, params_template: Any, last: int) -> tuple[Any, list[int]]:
        """The mean of the parameters of the last ``last`` checkpoints, and their steps.

        Checkpoints are restored one at a time into a running mean kept in float32
        (mean += (x - mean) / n), so memory holds two copies of the parameters whatever
        ``last`` is; the result has the dtypes of ``params_template``.
        """
        steps = self.all_steps()
        if last < 1:
            raise UserError(f"--average={last}: the number of checkpoints to average must be "
                            ">= 1")
        if len(steps) < last:
            found = ", ".join(map(str, steps)) or "none"
            raise UserError(
                f"cannot average the last {last} checkpoints: {self.directory} holds "
                f"{len(steps)} (steps {found}); train.keep_checkpoints sets how many a run keeps")
        chosen = steps[-last:]
        mean = None
        for n, step in enumerate(chosen, start=1):
            params = jax.tree.map(lambda x: np.asarray(x, np.float32),
                                  self.restore_params(step, params_template))
            if mean is None:
                mean = params
            else:
                mean = jax.tree.map(lambda m, x, n=n: m + (x - m) / n, mean, params)
        dtypes = jax.tree.map(lambda t: np.dtype(t.dtype), params_template)
        return jax.tree.map(lambda m, d: m.astype(d), mean, dtypes), chosen

    def average_last(self, params_template: Any, wanted: int) -> tuple[Any, list[int], list[str]]:
        """The mean of the last ``wanted`` checkpoints' parameters, or of every one the
        workdir holds if fewer: (params, their steps, notes). The notes are one line each,
        for the user: that fewer were averaged than wanted, and :func:`early_span`'s."""
        steps = self.all_steps()
        if not steps:
            raise UserError(f"{self.directory}: no checkpoints; train first")
        notes = []
        if len(steps) < wanted:
            notes.append(f"the config averages the last {wanted} checkpoints but "
                         f"{self.directory} holds {len(steps)}: averaging those")
        params, used = self.average_params(params_template, min(wanted, len(steps)))
        early = early_span(used)
        return params, used, [*notes, early] if early else notes

    def read_meta(self, step: int) -> dict[str, Any]:
        meta = self._read_meta(step)
        meta.pop(CHECKSUMS, None)
        return meta

    def _read_meta(self, step: int) -> dict[str, Any]:
        """The meta item of checkpoint ``step``; UserError naming it when it is missing or
        damaged (not a JSON object)."""
        where = self.directory / str(step) / "meta"
        try:
            with quiet.Dropped():
                meta = self.manager.restore(step, args=ocp.args.Composite(
                    meta=ocp.args.JsonRestore()))["meta"]
        except Exception as e:  # noqa: BLE001 -- whatever a damaged file makes orbax raise
            raise UserError(f"checkpoint metadata {where} is damaged: {_first_line(e)}") from e
        if not isinstance(meta, dict):
            raise UserError(f"checkpoint metadata {where} is damaged: a JSON "
                            f"{type(meta).__name__}, not an object")
        return dict(meta)

    def wait(self) -> None:
        """Waits for the save in flight; raises UserError if it did not complete, and
        WriteStalled if it did not return in time (:meth:`_finish_writing`)."""
        self._finish_writing()

    def close(self) -> None:
        self._finish_writing()
        if not self._stalled:  # closing waits for the writer threads
            self.manager.close()


def saved_shapes(checkpoint: storage.PathLike) -> dict[str, tuple[int, ...]] | None:
    """{leaf path ("opt_state/0/mu/..."): shape} of the state of the checkpoint directory
    ``checkpoint`` (``<workdir>/checkpoints/<step>``), read from its metadata alone; None when
    that is unreadable (a damaged checkpoint)."""
    try:
        with quiet.Dropped(ITEM_METADATA), ocp.StandardCheckpointer() as reader:
            tree = reader.metadata(storage.path(checkpoint) / "state").item_metadata
    except Exception:  # noqa: BLE001 -- unreadable metadata: a damaged checkpoint
        return None
    return None if tree is None else shapes(tree)


def early_span(steps: list[int]) -> str | None:
    """A one-line warning when averaged checkpoints ``steps`` (ascending) reach back before
    EARLY_FRACTION of the newest, else None."""
    if len(steps) < 2 or steps[0] >= EARLY_FRACTION * steps[-1]:
        return None
    return (f"the averaged checkpoints (steps {', '.join(map(str, steps))}) reach back to "
            f"{steps[0] / steps[-1]:.0%} of step {steps[-1]}, an early part of training; the "
            f"paper's span its last 4-6% of steps (--average=1 takes the latest alone)")


def _first_line(e: BaseException, limit: int = 200) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    text = f"{type(e).__name__}: {text}" if not isinstance(e, KeyError) else text.strip("'\"")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _abstract(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)
        if not isinstance(x, jax.ShapeDtypeStruct) else x, tree)
