"""Exports of a trained model to the engines people deploy, one module a target
(``ctranslate2``, ``hf``): each defines ``check(model_config)``, raising ConfigError for what
it cannot express, and ``export(loaded, config, workdir, directory, **options)``, writing
into a new empty directory. ``mapping`` (not a target) holds what they share; ``from_hf``
(not a target either) reads a MarianMT directory back into a workdir."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from transformer_jax import plugins
from transformer_jax.errors import UserError
from transformer_jax.exports import mapping
from transformer_jax.io import storage

NOT_TARGETS = ("mapping", "from_hf")


def names() -> tuple[str, ...]:
    """The targets: the modules of this package but NOT_TARGETS."""
    return tuple(n for n in plugins.module_names(tuple(__path__), "exports")
                 if n not in NOT_TARGETS)


def get(name: str) -> Any:
    """The module of target ``name``; UserError naming the known ones."""
    if name not in names():
        raise UserError(f"no export target {name!r}; the targets are {', '.join(names())}")
    return importlib.import_module(f"{__name__}.{name}")


def export(name: str, workdir: storage.PathLike, out: storage.PathLike,
           average: int | None = None, **options: Any) -> None:
    """Exports the model of ``workdir`` (its last ``average`` checkpoints averaged) to the
    new directory ``out`` with target ``name``. Every refusal is a UserError of one line,
    raised before anything is written; ``out`` appears whole or not at all."""
    target = get(name)
    mapping.check_new(out)
    loaded, config = mapping.load(workdir, average)
    for note in loaded.notes:
        logging.warning("warning: %s", note)
    target.check(loaded.model_config)
    with mapping.writing(out) as directory:
        target.export(loaded, config, str(workdir), directory, **options)
    logging.info("exported %s (checkpoint(s) %s) to %s", workdir,
                 ", ".join(map(str, loaded.steps)), out)
