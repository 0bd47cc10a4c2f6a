"""The attention kernels against each other: the paper's dense softmax, the local window of
Table 1's restricted self-attention, the window plus global positions (Longformer, BigBird)
and linear attention (elu + 1; Katharopoulos et al.).

    python -m transformer_jax.sweep experiments/attention_kernels.py --root=runs/kernels_demo \
        --scale=demo --seeds=3 --parallel=2
    python -m transformer_jax.compare runs/kernels_demo --baseline=attention=dense \
        --out=experiments/results/attention_kernels_demo

At --scale=demo (configs/demo.py: 3 layers, d_model 128, 4 heads, 450 steps on the built-in
corpus, whose sentences have 3 to 24 words) the window is r = 4 (a query sees 9 positions,
in the decoder 5), about a fifth of a typical sentence of 20 tokens, so that the window
bites as r = 128 would on sequences of several hundred; the first g = 2 positions of every
sentence are global (model.global_tokens, its default). At the paper's scale r is the
default, 128. Cross-attention is never windowed (the local kernels run it blockwise); linear
attention runs everywhere. Every point decodes the 1,000 test sentences greedily.

experiments/results/attention_kernels_demo/ holds the full run (the two commands above);
its shortened_200_steps/ an earlier run with three seeds: 200 steps instead of 450, warmup
100 at lr_scale 0.5 (a peak learning rate of 0.0044, inside the range that trains stably at
this scale, experiments/results/lr_warmup_demo), BLEU on the first 300 test sentences:

    python -m transformer_jax.sweep experiments/attention_kernels.py --root=runs/kernels_demo \
        --scale=demo --seeds=3 --parallel=2 --config.train.num_steps=200 \
        --config.optim.warmup_steps=100 --config.optim.lr_scale=0.5 \
        --config.train.eval_every=100 --config.train.checkpoint_every=100 \
        --config.train.bleu_sentences=300
    python -m transformer_jax.compare runs/kernels_demo --baseline=attention=dense \
        --out=experiments/results/attention_kernels_demo/shortened_200_steps
"""

from transformer_jax.sweeps import hyper
from transformer_jax.sweeps.experiment import Sweep

KERNELS = ("dense", "local", "local_global", "linear")


def get_sweep(arg: str | None = None) -> Sweep:
    del arg  # one sweep
    return Sweep(
        name="attention_kernels",
        config="configs/demo.py",
        grid=hyper.sweep("model.attention", KERNELS),
        parameter="model.attention",
        demo_overrides={"model.local_window": 4, "train.bleu_sentences": 1000},
        description="attention kernels: dense, local, local + global, linear",
    )
