"""Exports of a trained model to the engines people deploy, one module a target, found by
name (the export command's first argument; the mechanism is
:class:`transformer_jax.plugins.Registry`'s): ``ctranslate2``, ``hf``, and a target kept
elsewhere, one file in a directory of ``TRANSFORMER_JAX_EXPORTS``. A target module defines

* ``TRAITS``, a :class:`Traits`;
* ``check(model_config)``, raising ConfigError for what it cannot express;
* ``export(loaded, run, workdir, directory, **options)``, writing into a new empty
  directory (``run``: the run's :class:`~transformer_jax.evaluation.restore.WorkdirSpec`).

``mapping`` (not a target) holds what they share; ``from_hf`` (not a target either) reads a
MarianMT directory back into a workdir."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from transformer_jax import plugins
from transformer_jax.exports import mapping
from transformer_jax.io import storage

if TYPE_CHECKING:
    from transformer_jax.evaluation.restore import WorkdirSpec


@dataclasses.dataclass(frozen=True)
class Traits:
    """What the export command offers a target."""

    # The keyword options its ``export`` takes, each a flag of the export command
    # (``--quantization``); a flag of another target's is refused for it.
    options: tuple[str, ...] = ()


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_EXPORTS", "export target", traits="TRAITS",
    not_entries=("mapping", "from_hf"),
    needs=(plugins.Need("TRAITS", Traits), plugins.Need("check", shown="check(model_config)"),
           plugins.Need("export", shown="export(loaded, run, workdir, directory, "
                                        "**options)")))
names, get, having = REGISTRY.names, REGISTRY.get, REGISTRY.having


def export(name: str, workdir: storage.PathLike, run: WorkdirSpec, out: storage.PathLike,
           average: int | None = None, **options: Any) -> None:
    """Exports the model of ``workdir`` (``run``, the spec of its config; its last
    ``average`` checkpoints averaged) to the new directory ``out`` with target ``name``.
    Every refusal is a UserError of one line, raised before anything is written; ``out``
    appears whole or not at all."""
    target = get(name)
    mapping.check_new(out)
    loaded = mapping.load(workdir, run, average)
    for note in loaded.notes:
        logging.warning("warning: %s", note)
    target.module.check(loaded.model_config)
    with mapping.writing(out) as directory:
        target.module.export(loaded, run, str(workdir), directory, **options)
    logging.info("exported %s (checkpoint(s) %s) to %s", workdir,
                 ", ".join(map(str, loaded.steps)), out)
