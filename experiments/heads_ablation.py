"""Table 3 row A: the number of attention heads, with h * d_k = d_model kept constant.

    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads_ablation
    python -m transformer_jax.sweep experiments/heads_ablation.py --root=runs/heads_demo \
        --scale=demo --seeds=3 --parallel=2
    python -m transformer_jax.compare runs/heads_demo --baseline=base

h = 1, 4, 8 (the base model), 16, 32 with d_k = d_v = 512 / h: the variants of row A in
transformer_jax/config.py (VARIANTS). The paper (newstest2013, PPL
and BLEU): 5.29/24.9, 5.00/25.5, 4.92/25.8, 4.91/25.8, 5.01/25.4 -- one head is 0.9 BLEU
below the best, and quality drops again with too many heads. At --scale=demo (d_model 128)
d_k = 128, 32, 16, 8, 4; experiments/results/heads_ablation_demo/ holds a measured run
with three seeds.
"""

from transformer_jax import config
from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Sweep


def get_sweep(arg: str | None = None) -> Sweep:
    del arg  # one sweep
    quantity, variants = config.table3_rows()["A"]
    return Sweep(
        name="heads_ablation",
        config="configs/table3.py",
        grid=hyper.sweep("variant", variants),
        parameter=quantity,
        description="Table 3 row A: attention heads h, h * d_k = d_model constant",
    )
