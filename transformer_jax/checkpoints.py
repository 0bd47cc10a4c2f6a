"""Checkpoints in the workdir with orbax: train state, data-loader position and metadata.

Each checkpoint ``<workdir>/checkpoints/<step>/`` holds three items:

* ``state`` -- params, optimizer state and step (a pytree);
* ``data``  -- the grain iterator's position, one file per process;
* ``meta``  -- JSON: the vocabulary size and anything the run wants to remember.

orbax writes every checkpoint under a temporary name and renames it when complete, so a
killed run never leaves half a checkpoint; the manager keeps the last ``keep``.
:meth:`Checkpoints.average_params` averages the parameters of the last N of them, as the
paper does before evaluating (the last 5 for the base model, 20 for the big one).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp

from transformer_jax.errors import UserError


class Checkpoints:
    """The checkpoints of one workdir."""

    def __init__(self, workdir: str | Path, keep: int):
        self.directory = Path(workdir).absolute() / "checkpoints"
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
            item_names=("state", "data", "meta"),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, state: Any, data_iterator: Any | None, meta: dict[str, Any],
             force: bool = False) -> bool:
        """Saves (asynchronously); returns whether a checkpoint was started."""
        items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointSave(data_iterator)
        return self.manager.save(step, args=ocp.args.Composite(**items), force=force)

    def restore(self, step: int, state_template: Any,
                data_iterator: Any | None = None) -> tuple[Any, dict[str, Any]]:
        """Restores the state (shaped like ``state_template``) and, if given, moves
        ``data_iterator`` to the saved position. Returns (state, meta)."""
        items = {"state": ocp.args.StandardRestore(_abstract(state_template)),
                 "meta": ocp.args.JsonRestore()}
        if data_iterator is not None:
            items["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        logging.info("restored checkpoint %s", self.directory / str(step))
        return restored["state"], restored["meta"]

    def restore_params(self, step: int, params_template: Any) -> Any:
        """Only the parameters of checkpoint ``step`` (for evaluation and decoding), shaped
        like ``params_template`` (arrays or ``jax.ShapeDtypeStruct``); host numpy arrays."""
        template = {"params": params_template}
        # Reading part of the state makes orbax warn about every item left unread.
        quiet = _DropMessages("was found in the checkpoint, but could not be restored")
        logging.getLogger("absl").addFilter(quiet)
        try:
            with ocp.PyTreeCheckpointer() as reader:
                restored = reader.restore(
                    self.directory / str(step) / "state",
                    args=ocp.args.PyTreeRestore(
                        item=template, partial_restore=True,
                        restore_args=jax.tree.map(
                            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), template)))
        finally:
            logging.getLogger("absl").removeFilter(quiet)
        return restored["params"]

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

    def read_meta(self, step: int) -> dict[str, Any]:
        return self.manager.restore(step, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore()))["meta"]

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def _abstract(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)
        if not isinstance(x, jax.ShapeDtypeStruct) else x, tree)


class _DropMessages(logging.Filter):
    """Drops log records containing ``text``."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()
