"""The datasets, found by name: each is a module of this package holding ``DATASET``, a
:class:`Dataset` (plain data: what the config, the data pipeline and the sweeps ask of it).

``data.name`` (and ``dataset=NAME`` of a config file's argument) is a module's name: the
built-in corpus ``builtin``, the paper's ``wmt14_ende`` and ``wmt14_enfr``, your own files
``text``. The datasets are a :class:`transformer_jax.plugins.Registry`: the modules of this
package, of any ``transformer_jax/config/datasets/`` directory under an entry of ``sys.path``
(``PYTHONPATH``) when this package is first imported and of the directories of
``TRANSFORMER_JAX_DATASETS``, and those given to :func:`register` since. A dataset that TFDS
knows is one module::

    # transformer_jax/config/datasets/ted_pten.py: data.name=ted_pten
    from transformer_jax.config.datasets import Dataset

    DATASET = Dataset(tfds_name="ted_hrlr_translate/pt_to_en",
                      settings={"data.source_lang": "pt", "data.target_lang": "en",
                                "data.vocab_size": 8000})

What reads a dataset is its ``source`` kind, an entry of the registry of
``transformer_jax/data/source_kinds/``: ``"tfds"`` (a prepared TFDS dataset), ``"generated"``
(a TFDS builder of generated data, prepared on first use) or ``"text"`` (the files named by
the config).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any

from transformer_jax import plugins
from transformer_jax.errors import ConfigError

# Datasets under sys.path too: transformer_jax/config/datasets/ of any entry is searched
# after this one (a module here of the same name wins).
for _entry in sys.path:
    _dir = os.path.realpath(os.path.join(_entry or os.curdir, *__name__.split(".")))
    if os.path.isdir(_dir) and _dir not in map(os.path.realpath, __path__):  # noqa: F821
        __path__.append(_dir)  # noqa: F821

# The splits every dataset has, named as the code asks for them.
SPLITS = ("train", "validation", "test")
# The paper's EN-DE: the dataset of a config that names none.
DEFAULT = "wmt14_ende"


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One dataset, as data.

    ``settings`` are the config fields it sets (languages, vocabulary size), applied after a
    variant's overrides. ``source`` is the kind of source that reads it (an entry of
    ``data/source_kinds/``). ``splits`` maps each of ``SPLITS`` to where the
    source finds it: a TFDS split for ``"tfds"`` and ``"generated"``, the config field
    holding its files for ``"text"``. ``tfds_name`` is its TFDS name, and ``tfds_module`` a
    module to import first that registers its TFDS builder (TFDS imports its dataset modules
    lazily). ``rows_from_data``: with ``data.row_len`` 0 its training rows are sized to its
    sentences, not kept at ``data.max_len``. ``how_to_prepare`` ends the message for a
    dataset that is not prepared.
    """

    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    source: str = "tfds"
    tfds_name: str = ""
    splits: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: {split: split for split in SPLITS})
    tfds_module: str = ""
    rows_from_data: bool = False
    how_to_prepare: str = ("prepare it with TFDS as array_record "
                           "(download_and_prepare(file_format='array_record'))")

    def __post_init__(self) -> None:
        missing = [s for s in SPLITS if s not in self.splits]
        if missing:
            raise ConfigError(f"Dataset splits {dict(self.splits)} lack {', '.join(missing)}")


REGISTRY = plugins.Registry(
    __name__, "TRANSFORMER_JAX_DATASETS", "data.name",
    needs=(plugins.Need("DATASET", Dataset, "DATASET = Dataset(...)"),),
    make=lambda entry: entry.module.DATASET)
names = REGISTRY.names


def register(name: str, dataset: Dataset) -> Dataset:
    """Makes ``dataset`` known as ``name`` (for data.name, config files' ``dataset=NAME``) in
    this process; ``REGISTRY.remove(name)`` forgets it."""
    if not isinstance(dataset, Dataset):
        raise ConfigError(f"dataset {name}: {dataset!r} is not a Dataset")
    module = types.ModuleType(f"{__name__}.{name}")
    module.DATASET = dataset  # type: ignore[attr-defined]
    REGISTRY.add(name, module)
    return dataset


def get(name: str, field: str = "data.name") -> Dataset:
    """The dataset ``name``; ConfigError naming ``field`` and the known names if unknown."""
    REGISTRY.check(name, field)
    return REGISTRY.get(name)


class _Datasets(Mapping[str, Dataset]):
    """Every dataset by name, in the order of :func:`names`, read from the registry when
    asked."""

    def __getitem__(self, name: str) -> Dataset:
        if name not in REGISTRY:
            raise KeyError(name)
        return get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY.names())

    def __len__(self) -> int:
        return len(REGISTRY.names())


DATASETS: Mapping[str, Dataset] = _Datasets()
