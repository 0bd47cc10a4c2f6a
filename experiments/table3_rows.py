"""Table 3 rows B to E of the paper, one sweep per quantity, each with the base model.

    python -m transformer_jax.sweep experiments/table3_rows.py:B --root=runs/table3_B
    python -m transformer_jax.sweep experiments/table3_rows.py:C_N --root=runs/table3_C_N
    python -m transformer_jax.sweep experiments/table3_rows.py --root=runs/table3_BE  # all
    python -m transformer_jax.compare runs/table3_B

Sweeps (the argument after the colon): B (d_k 16, 32, 64), C_N (layers 2, 4, 6, 8), C_d
(d_model 256, 512, 1024), C_ff (d_ff 1024, 2048, 4096), D_drop (P_drop 0, 0.1, 0.2), D_ls
(eps_ls 0, 0.1, 0.2), E (sinusoidal against learned positions). Without an argument, every
variant of rows B-E and the base model in one sweep over the variant's name. Points are
named after the variant, so the base model is trained once per root. The rows are derived
from the variants of transformer_jax/config.py (config.table3_rows); row A is
experiments/heads_ablation.py.
"""

from transformer_jax import config
from transformer_jax.errors import UserError
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Sweep


def get_sweep(arg: str | None = None) -> Sweep:
    rows = {name: row for name, row in config.table3_rows().items() if name != "A"}
    if arg is None:
        variants = ["base"] + [v for _, names in rows.values() for v in names if v != "base"]
        return Sweep(name="table3_rows", config="configs/table3.py",
                     grid=hyper.sweep("variant", variants), parameter="variant",
                     description="Table 3 rows B-E against the base model")
    if arg not in rows:
        raise UserError(f"unknown Table 3 sweep {arg!r}; known: {', '.join(rows)}")
    quantity, variants = rows[arg]
    return Sweep(name=f"table3_{arg}", config="configs/table3.py",
                 grid=hyper.sweep("variant", variants), parameter=quantity,
                 description=f"Table 3 row {arg.split('_')[0]}: {quantity}")
