"""Shared test helpers: a tiny config on the built-in corpus."""

from transformer_jax import config as config_lib


def tiny_config(data_dir, **train):
    """A seconds-long run on the built-in corpus: 1 layer, d_model 32, 16-token rows."""
    c = config_lib.build("base", "builtin")
    c.data.data_dir = str(data_dir)
    c.data.vocab_size = 200
    c.data.vocab_sample = 200_000
    c.data.max_len = 32
    c.data.tokens_per_batch = 16 * 32
    c.model.update(num_layers=1, d_model=32, d_ff=64, num_heads=4, max_len=64, dropout_rate=0.1)
    c.optim.warmup_steps = 20
    c.train.update(num_steps=20, log_every=5, eval_every=10, eval_batches=2,
                   checkpoint_every=10, devices=1)
    c.train.update(train)
    return c


_TRAINED: dict[str, object] = {}


def trained_workdir(tmp_path_factory, data_dir):
    """A tiny run trained once per test session (30 steps, a checkpoint every 10, the last 3
    kept, validation BLEU of 8 sentences every 10 steps): for the decoding commands."""
    key = str(data_dir)
    if key not in _TRAINED:
        from transformer_jax import train

        workdir = tmp_path_factory.mktemp("trained")
        config = tiny_config(data_dir, num_steps=30, checkpoint_every=10, keep_checkpoints=3,
                             eval_every=30, bleu_every=10, bleu_sentences=8)
        train.train_and_evaluate(config, workdir)
        _TRAINED[key] = workdir
    return _TRAINED[key]
