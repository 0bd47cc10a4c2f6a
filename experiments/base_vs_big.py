"""Transformer (base) against Transformer (big), as in Tables 2 and 3.

    python -m transformer_jax.sweep experiments/base_vs_big.py --root=runs/base_vs_big \
        --launcher=slurm --config.model.dtype=bfloat16
    python -m transformer_jax.compare runs/base_vs_big
    python -m transformer_jax.sweep experiments/base_vs_big.py --root=runs/base_vs_big_demo \
        --scale=demo --seeds=3 --parallel=2

Base: 6 layers, d_model 512, d_ff 2048, 8 heads, P_drop 0.1, 100K steps. Big: d_model 1024,
d_ff 4096, 16 heads, P_drop 0.3, 300K steps. The paper: newstest2013 PPL 4.92 / 4.33 and BLEU
25.8 / 26.4 (Table 3); newstest2014 BLEU 27.3 / 28.4 (Table 2, with checkpoint averaging).
At --scale=demo big becomes d_model 256, d_ff 1,024, 16 heads, with P_drop 0.1 for 750 steps
(against base's 450): about four times base's CPU time, where the paper's 3 x the steps would
be seven (configs.md, "Scales").
"""

from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Sweep


def get_sweep(arg: str | None = None) -> Sweep:
    del arg  # one sweep
    return Sweep(
        name="base_vs_big",
        config="configs/table3.py",
        grid=hyper.sweep("variant", ["base", "big"]),
        parameter="variant",
        description="Transformer base against big",
    )
