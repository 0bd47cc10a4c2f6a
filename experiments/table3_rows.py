"""Table 3 rows B to E of the paper, one sweep per quantity, each with the base model.

    python -m transformer_jax.sweep experiments/table3_rows.py:B --root=runs/table3_B
    python -m transformer_jax.sweep experiments/table3_rows.py:C_N --root=runs/table3_C_N
    python -m transformer_jax.sweep experiments/table3_rows.py --root=runs/table3_BE  # all
    python -m transformer_jax.compare runs/table3_B

Sweeps (the argument after the colon): B (d_k 16, 32, 64), C_N (layers 2, 4, 6, 8), C_d
(d_model 256, 512, 1024), C_ff (d_ff 1024, 2048, 4096), D_drop (P_drop 0, 0.1, 0.2), D_ls
(eps_ls 0, 0.1, 0.2), E (sinusoidal against learned positions). Without an argument, every
variant of rows B-E and the base model in one sweep over the variant's name. Row A is
experiments/heads_ablation.py. Points are named after the variant, so the base model is
trained once per root.
"""

from transformer_jax.errors import UserError
from transformer_jax.sweep import Point, Sweep

# sweep -> (swept quantity, [(variant, value), ...]) in increasing order of the value.
ROWS: dict[str, tuple[str, list[tuple[str, object]]]] = {
    "B": ("d_k", [("B_dk16", 16), ("B_dk32", 32), ("base", 64)]),
    "C_N": ("N", [("C_N2", 2), ("C_N4", 4), ("base", 6), ("C_N8", 8)]),
    "C_d": ("d_model", [("C_d256", 256), ("base", 512), ("C_d1024", 1024)]),
    "C_ff": ("d_ff", [("C_ff1024", 1024), ("base", 2048), ("C_ff4096", 4096)]),
    "D_drop": ("P_drop", [("D_drop0", 0.0), ("base", 0.1), ("D_drop02", 0.2)]),
    "D_ls": ("eps_ls", [("D_ls0", 0.0), ("base", 0.1), ("D_ls02", 0.2)]),
    "E": ("positions", [("base", "sinusoidal"), ("E_learned", "learned")]),
}


def get_sweep(arg: str | None = None) -> Sweep:
    if arg is None:
        variants = ["base"] + [v for _, points in ROWS.values() for v, _ in points
                               if v != "base"]
        return Sweep(name="table3_rows", config="configs/table3.py", parameter="variant",
                     points=tuple(Point(v, v) for v in variants),
                     description="Table 3 rows B-E against the base model")
    if arg not in ROWS:
        raise UserError(f"unknown Table 3 sweep {arg!r}; known: {', '.join(ROWS)}")
    parameter, points = ROWS[arg]
    return Sweep(name=f"table3_{arg}", config="configs/table3.py", parameter=parameter,
                 points=tuple(Point(v, value) for v, value in points),
                 description=f"Table 3 row {arg.split('_')[0]}: {parameter}")
