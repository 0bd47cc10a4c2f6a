"""Checkpoints in the workdir with orbax: train state, data-loader position and metadata.

Each checkpoint ``<workdir>/checkpoints/<step>/`` holds three items:

* ``state`` -- params, optimizer state and step (a pytree);
* ``data``  -- the grain iterator's position, one file per process;
* ``meta``  -- JSON: the vocabulary size and anything the run wants to remember.

orbax writes every checkpoint under a temporary name and renames it when complete, so a
killed run never leaves half a checkpoint; the manager keeps the last ``keep``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp


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
        """Only the parameters of checkpoint ``step`` (for evaluation and decoding)."""
        meta = self.manager.item_metadata(step)
        del meta  # the structure comes from the template
        state = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(partial_restore=True, item={"params": params_template})))
        return state["state"]["params"]

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
