"""Preparing a TFDS dataset of the registry (the paper's WMT14) as array_record, once.

:func:`prepare` runs the dataset's TFDS builder (for ``wmt14_ende`` / ``wmt14_enfr``,
``wmt14_translate/de-en`` / ``/fr-en`` of TFDS's ``translate/wmt.py``) through
``sources.prepare_generated`` (one process at a time; a ``gs://`` data_dir is prepared locally
and copied up): it downloads statmt's archives into ``<data_dir>/downloads``, checks them
against the checksums TFDS records, extracts them, parses the parallel text and SGML files and
writes the splits as array_record. What needs TensorFlow: TFDS's archive extractor
(``core/download/extractor.py`` writes each extracted file with ``tf.io.gfile``); the
downloads (``requests``), the parsing (``translate/wmt.py``: plain Python) and the
array_record writer do not. Hence the ``prepare`` extra.

TFDS writes a dataset in an ``incomplete.*`` folder renamed into place at the very end, so a
failed or killed preparation leaves nothing the reader takes for the dataset; the downloads
that finished are kept, and a re-run goes on from them. A failure ends in one line
(:class:`DataError`): the URL that failed or the file that did not parse, and the command to
run again.
"""

from __future__ import annotations

import importlib
import logging
import re
import shlex

import requests
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download import download_manager

from transformer_jax.config import datasets
from transformer_jax.data import source_kinds, sources
from transformer_jax.errors import ConfigError, DataError

# What a failed download raises, after TFDS's own retries: requests' errors and TFDS's.
_DOWNLOAD_ERRORS = (requests.exceptions.RequestException, tfds.download.DownloadError,
                    download_manager.NonMatchingChecksumError)


def command(name: str, data_dir: str | None) -> str:
    """The command that prepares ``name`` under ``data_dir``."""
    line = f"python -m transformer_jax.prepare {name}"
    return line + (f" --data_dir={shlex.quote(data_dir)}" if data_dir else "")


def tfds_dataset(name: str) -> datasets.Dataset:
    """The registry's dataset ``name``, if it is prepared beforehand (its source kind's
    ``prepared`` trait: ``source="tfds"``), with its TFDS builder registered."""
    dataset = datasets.get(name, field="dataset")
    prepared = source_kinds.having("prepared")
    if dataset.source not in prepared:
        tfds_ones = [n for n, d in datasets.DATASETS.items() if d.source in prepared]
        raise ConfigError(f"dataset {name!r} has source {dataset.source!r}, which needs no "
                          f"preparing; the TFDS datasets are {', '.join(tfds_ones)}")
    if dataset.tfds_module:
        importlib.import_module(dataset.tfds_module)
    return dataset


def _cause(e: BaseException) -> tuple[BaseException | None, str | None]:
    """The first download error in ``e``'s chain, and the URL it names (if any)."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, _DOWNLOAD_ERRORS):
            url = getattr(getattr(seen, "request", None), "url", None)
            if not url:  # TFDS's own errors name the URL in their text
                found = re.search(r"https?://[^\s,;'\"]+", str(seen))
                url = found.group(0).rstrip(".") if found else None
            return seen, url
        seen = seen.__cause__ or seen.__context__
    return None, None


def _one_line(text: object, limit: int) -> str:
    return " ".join(str(text).split())[:limit]


def prepare(name: str, data_dir: str | None = None) -> dict[str, int]:
    """Prepares the registry's dataset ``name`` as array_record under ``data_dir`` (TFDS's
    default if None) unless it is there already; returns its number of pairs per split.

    Raises :class:`DataError`, one line, if a download, an extraction or the parsing of a file
    fails.
    """
    dataset = tfds_dataset(name)
    retry = command(name, data_dir)
    logging.info("preparing %s (%s) under %s, unless it is there", name, dataset.tfds_name,
                 data_dir or "~/tensorflow_datasets")
    try:
        sources.prepare_generated(dataset.tfds_name, data_dir)
    except ModuleNotFoundError as e:
        if e.name != "tensorflow":
            raise
        raise DataError(f"{name}: TFDS extracts the downloaded archives with TensorFlow; "
                        f"install it (pip install -e '.[prepare]') and run {retry}") from e
    except Exception as e:
        cause, url = _cause(e)
        if cause is not None:
            what = f"downloading {url} failed" if url else "a download failed"
            why = ("its size or sha256 is not the one TFDS records for it: the file changed "
                   "on the server or the download was cut short"
                   if isinstance(cause, download_manager.NonMatchingChecksumError)
                   else _one_line(cause, 300))
            raise DataError(f"{name}: {what} ({why}); what was downloaded is kept, run "
                            f"again: {retry}") from e
        if isinstance(e, (AssertionError, ValueError, OSError)) or \
                type(e).__name__ == "ExtractError":
            raise DataError(f"{name}: preparing {dataset.tfds_name} failed, nothing of it "
                            f"was kept: {_one_line(e, 400)}; mend or delete that file and "
                            f"run again: {retry}") from e
        raise
    info = tfds.builder(dataset.tfds_name, data_dir=data_dir, file_format="array_record").info
    return {split: info.splits[split].num_examples for split in info.splits}
