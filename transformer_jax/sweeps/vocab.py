"""One vocabulary for the points of a sweep trained on the same data."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from transformer_jax.io import layout, storage, workdirs

# Data fields that decide the vocabulary a run trains.
VOCAB_FIELDS = ("name", "data_dir", "source_lang", "target_lang", "train_files",
                "vocab_size", "vocab_sample")


def share_vocabulary(root: storage.Path, workdir: storage.Path,
                     vocabulary: Mapping[str, Any]) -> bool:
    """Copies the vocabulary of another point under ``root`` trained on the same data
    (``vocabulary``: the point's VOCAB_FIELDS of its data section and their values) into a
    new ``workdir``; returns whether it did.

    The paper trains one vocabulary for all its variants; sharing it also saves each point
    the vocabulary's training. A point that has one (or started without) keeps its own.
    """
    target = workdir / layout.VOCAB / layout.VOCAB_MODEL
    if target.exists() or (workdir / layout.CHECKPOINTS).exists():
        return False
    wanted = {k: vocabulary[k] for k in VOCAB_FIELDS}
    for other in sorted(root.iterdir()):
        source = other / layout.VOCAB / layout.VOCAB_MODEL
        saved = workdirs.read_object(other / layout.CONFIG)
        if other == workdir or not source.exists() or not isinstance(
                (saved or {}).get("data"), dict):
            continue
        if {k: saved.get("data", {}).get(k) for k in VOCAB_FIELDS} == wanted:
            target.parent.mkdir(parents=True, exist_ok=True)
            storage.write_atomically(target, source.read_bytes())
            logging.info("%s: vocabulary shared from %s", workdir.name, other.name)
            return True
    return False
