"""Why Transformer (big) is unstable at the demo scale: one factor of big changed at a time.

    python -m transformer_jax.sweep experiments/big_factors.py --root=runs/big_factors \
        --scale=demo --seeds=3 --parallel=2
    python -m transformer_jax.compare runs/big_factors --baseline=big \
        --out=experiments/results/big_factors_demo

At the demo scale big is d_model 256, d_ff 1,024, 16 heads of d_k 16, P_drop 0.3, 3 layers,
the paper's schedule with 300 warmup steps (a peak learning rate of 256^-0.5 x 300^-0.5 =
0.0036, against base's 128^-0.5 x 300^-0.5 = 0.0051). Every setting here trains 450 steps,
base's count: a big step costs about 2.6 base steps on a CPU, so 450 is what fits in three
times base's CPU time. Each setting changes one thing:

* ``big`` -- as configs/table3.py:big defines it (the control);
* ``P_drop=0.1`` -- base's dropout instead of big's 0.3;
* ``lr=x1.41`` / ``lr=x0.5`` -- the peak learning rate of base (d_model^-0.5 at 128 rather
  than 256), or half of big's;
* ``warmup=150`` -- half the warmup, which also raises the peak by sqrt(2);
* ``norm=pre`` -- LayerNorm before each sub-layer (and after each stack) instead of after;
* ``width=base`` -- base's d_model 128 and d_ff 512 with big's 16 heads (d_k 8) and P_drop.

The number of steps is the control's own curve: the same runs resumed to the scale's 1,350
(``--config.train.num_steps=1350`` on a copy of the root; experiments/results/big_factors_demo
says how).
"""

from transformer_jax.sweeps.experiment import Sweep

FACTORS = [
    {"name": "big"},
    {"name": "P_drop=0.1", "model.dropout_rate": 0.1},
    {"name": "lr=x1.41", "optim.lr_scale": 2 ** 0.5},
    {"name": "lr=x0.5", "optim.lr_scale": 0.5},
    {"name": "warmup=150", "optim.warmup_steps": 150},
    {"name": "norm=pre", "model.norm": "pre"},
    {"name": "width=base", "model.d_model": 128, "model.d_ff": 512},
]


def get_sweep(arg: str | None = None) -> Sweep:
    del arg  # one sweep
    return Sweep(
        name="big_factors",
        config="configs/table3.py",
        variant="big",
        grid=[dict(f, variant="big") for f in FACTORS],
        parameter="name",
        demo_overrides={"train.num_steps": 450},
        description="Transformer big at the demo scale, one factor changed at a time",
    )
