"""The CPU demo: a small Transformer on the built-in corpus, trained and evaluated in minutes.

    make demo        # = python -m transformer_jax.main --config=configs/demo.py --workdir=runs/demo

The paper's architecture and recipe (post-LN, shared embeddings, sinusoids, Adam with
warmup, label smoothing 0.1) at the demo scale of transformer_jax/config/scales.py (SCALES): 3
layers, d_model 128, d_ff 512, 4 heads, batches of ~2,000 tokens, 450 steps. Ends by
writing attention pictures of two test sentences to <workdir>/pictures (see
transformer_jax/analysis/pictures.py).
Expected: test BLEU >= 70 (greedy) after a few minutes on a 2-core CPU; docs/results.md has the
measured figures.
"""

from transformer_jax import config as config_lib


def get_config(arg: str | None = None):
    # The base model at the demo scale (config.SCALES["demo"]), with 4 heads of d_k 32
    # rather than the base model's 8 of 16: as good and faster on a CPU.
    c = config_lib.from_arg(arg, "base", default_dataset="builtin", default_scale="demo")
    c.model.num_heads = 4
    # Two test sentences with a verb-final subordinate clause ("..., ob der Lehrer den Vogel
    # besucht hat"): their pictures in <workdir>/pictures show the cross-attention following
    # the reordered verbs.
    c.train.visualize_sentences = (49, 181)
    # The demo reports greedy BLEU: beam search (the paper's, and the default everywhere
    # else) costs another minute or more on a 2-core CPU; `python -m transformer_jax.evaluate`
    # gives the beam-search figure of the same run.
    c.decode.strategy = "greedy"
    return c
