"""Prepare a dataset of the registry (the paper's WMT14) as array_record, once, before training.

    python -m transformer_jax.prepare wmt14_ende [--data_dir=~/tensorflow_datasets]
    python -m transformer_jax.prepare wmt14_enfr

Then train with ``--config.data.data_dir`` at the same folder. The library is
:mod:`transformer_jax.data.prepare` (what needs TensorFlow: docs/data.md, "Preparing WMT14").
"""

from __future__ import annotations

from transformer_jax import cli

_DATA_DIR = cli.define_path_flag(
    "data_dir", "Where to write it (TFDS's default, ~/tensorflow_datasets).", required=False)


def main(argv: list[str]) -> None:
    """Prepares the dataset named by the one argument and prints its pairs per split."""
    from transformer_jax.data import prepare

    if len(argv) != 2:
        cli.fail("give one dataset name, e.g. python -m transformer_jax.prepare wmt14_ende")
    with cli.clean_errors():
        if _DATA_DIR.value:
            from transformer_jax.io import storage

            storage.check(_DATA_DIR.value, "--data_dir")
        for split, count in prepare.prepare(argv[1], _DATA_DIR.value).items():
            print(f"{split}: {count} pairs")


if __name__ == "__main__":
    cli.run(main)
