"""Experiment configuration: the paper's defaults, its named models, datasets and scales as
data, one way to override any field, and validation.

Every config file under ``configs/`` is a thin ``get_config(arg)`` calling :func:`from_arg`,
which builds a config from three tables (:func:`build`):

* ``VARIANTS`` (``variants.py``) -- the base model, the big model and every row of Table 3
  of the paper, each a :class:`Variant`: dotted overrides of any section
  (``{"model.num_heads": 4, ...}``), the Table 3 row and quantity it varies, and overrides
  that hold on one dataset only (big on EN-FR: P_drop 0.1). The row sweeps
  (:func:`table3_rows`, ``table3.py``) are derived from it.
* ``DATASETS`` (``datasets/``, one module a dataset) -- each dataset's own settings
  (languages, vocabulary size) and what the data pipeline reads it with.
* ``SCALES`` (``scales.py``) -- the sizes at which any variant trains: ``paper`` and
  ``demo`` (CPU size); a variant keeps its ratios to the base model at every scale.

A config is a ``ml_collections.ConfigDict`` with five sections (``defaults.py``):

* ``model``  -- the architecture (names as in the paper: ``d_model``, ``d_ff``, ``num_heads``...)
* ``data``   -- which dataset, vocabulary and batching
* ``optim``  -- Adam and the learning-rate schedule (the paper's warmup by default)
* ``train``  -- steps, label smoothing, logging, checkpoints, parallelism
* ``decode`` -- decoding strategy (the paper's beam search by default)

:func:`apply_overrides` (``overrides.py``) is the one way to change fields by their dotted
names (the command line's ``--config.FIELD=VALUE``, sweeps' grids); :func:`validate`
(``validation.py``) refuses an invalid config with one :class:`ConfigError` naming the field
and the allowed range, before anything is compiled.

The names below are this package's API; each is defined once, in the module named.
"""

from transformer_jax.config import datasets
from transformer_jax.config.builder import (
    apply_scale,
    build,
    dataset_settings,
    from_arg,
    parse_variant_arg,
)
from transformer_jax.config.datasets import DATASETS, Dataset
from transformer_jax.config.defaults import MODEL_FIELDS, SEED_FIELDS, base_config
from transformer_jax.config.fields import (
    apply_all,
    check_name,
    checkpoints_to_average,
    derived_dims,
    get_field,
    set_field,
)
from transformer_jax.config.overrides import (
    SELECTORS,
    apply_overrides,
    dataset_fields,
    refuse_selector,
)
from transformer_jax.config.scales import SCALES, Scale
from transformer_jax.config.table3 import quantity, table3_rows
from transformer_jax.config.validation import (
    BOOLS,
    CHOICES,
    FLOATS,
    INT_MAX,
    INTS,
    SEED_MAX,
    STRINGS,
    check_value,
    validate,
)
from transformer_jax.config.variants import QUANTITIES, VARIANTS, Variant

__all__ = [
    "BOOLS", "CHOICES", "DATASETS", "FLOATS", "INTS", "INT_MAX", "MODEL_FIELDS", "QUANTITIES",
    "SCALES", "SEED_FIELDS", "SEED_MAX", "SELECTORS", "STRINGS", "VARIANTS", "Dataset", "Scale",
    "Variant", "apply_all", "apply_overrides", "apply_scale", "base_config", "build",
    "check_name", "check_value", "checkpoints_to_average", "dataset_fields", "dataset_settings",
    "datasets", "derived_dims", "from_arg", "get_field", "parse_variant_arg", "quantity",
    "refuse_selector", "set_field", "table3_rows", "validate",
]
