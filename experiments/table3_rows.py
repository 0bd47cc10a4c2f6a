"""Table 3 of the paper, rows A to E, each variant against the base model.

    python -m transformer_jax.sweep experiments/table3_rows.py --root=runs/table3  # all
    python -m transformer_jax.sweep experiments/table3_rows.py:C_N --root=runs/table3_C_N
    python -m transformer_jax.compare runs/table3
    python -m transformer_jax.sweep experiments/table3_rows.py --root=runs/table3_demo \
        --scale=demo --seeds=3 --parallel=2

Without an argument, every variant of rows A-E and the base model in one sweep over the
variant's name (19 settings); ``compare`` then writes, beside the usual report, each row's
change in perplexity and BLEU against the base model next to the paper's own change
(``table3.md``). With an argument, one row's quantity: A (heads h, h * d_k = d_model), B
(d_k 16, 32, 64), C_N (layers 2, 4, 6, 8), C_d (d_model 256, 512, 1024), C_ff (d_ff 1024,
2048, 4096), D_drop (P_drop 0, 0.1, 0.2), D_ls (eps_ls 0, 0.1, 0.2), E (sinusoidal against
learned positions). Points are named after the variant, so the base model is trained once
per root. The rows are derived from the variants of transformer_jax/config/variants.py
(config.table3_rows); experiments/heads_ablation.py is row A alone.
experiments/results/table3_demo/ holds the demo-scale run of every row, three seeds.
"""

from transformer_jax import config
from transformer_jax.errors import UserError, shown
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Sweep


def get_sweep(arg: str | None = None) -> Sweep:
    rows = config.table3_rows()
    if arg is None:
        variants = ["base"] + [v for _, names in rows.values() for v in names if v != "base"]
        return Sweep(name="table3_rows", config="configs/table3.py",
                     grid=hyper.sweep("variant", variants), parameter="variant",
                     description="Table 3 rows A-E against the base model")
    if arg not in rows:
        raise UserError(f"unknown Table 3 sweep {shown(repr(arg))}; known: {', '.join(rows)}")
    quantity, variants = rows[arg]
    return Sweep(name=f"table3_{arg}", config="configs/table3.py",
                 grid=hyper.sweep("variant", variants), parameter=quantity,
                 description=f"Table 3 row {arg.split('_')[0]}: {quantity}")
