"""Table 3 row A: the number of attention heads, with h * d_k = d_model kept constant.

    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads_ablation
    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads_demo \
        --scale=demo --parallel=2          # 16 min on an idle 2-core CPU
    python -m transformer_jax.compare runs/heads_ablation

h = 1, 4, 8 (the base model), 16, 32 with d_k = d_v = 512 / h. The paper (newstest2013, PPL
and BLEU): 5.29/24.9, 5.00/25.5, 4.92/25.8, 4.91/25.8, 5.01/25.4 -- one head is 0.9 BLEU
below the best, and quality drops again with too many heads. At --scale=demo (d_model 128)
d_k = 128, 32, 16, 8, 4; experiments/results/heads_ablation_demo/ holds a measured run.
"""

from transformer_jax.sweep import Point, Sweep


def get_sweep(arg: str | None = None) -> Sweep:
    del arg  # one sweep
    return Sweep(
        name="heads_ablation",
        config="configs/table3.py",
        parameter="h",
        points=(Point("A_h1", 1), Point("A_h4", 4), Point("base", 8), Point("A_h16", 16),
                Point("A_h32", 32)),
        description="Table 3 row A: attention heads h, h * d_k = d_model constant",
    )
