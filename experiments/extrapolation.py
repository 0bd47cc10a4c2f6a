"""The paper's claim, section 3.5: sinusoidal positions were chosen "because it may allow the
model to extrapolate to sequence lengths longer than the ones encountered during training".

    python -m transformer_jax.sweep experiments/extrapolation.py:trained \
        --root=runs/extrapolation --scale=demo --seeds=3 --parallel=2
    cd runs/extrapolation  # named as the full sweep names them; the rotary models copied
    for p in sinusoidal learned rotary; do for s in 0 1 2; do
      mv "positions=$p,seed=$s" "positions=$p,position_scale=1,seed=$s"; done; done
    for s in 0 1 2; do
      new="positions=rotary,position_scale=0.333,seed=$s"
      cp -r "positions=rotary,position_scale=1,seed=$s" "$new"
      rm -r "$new/eval" "$new/final_metrics.json" "$new/sweep_point.json"
    done
    cd -
    python -m transformer_jax.sweep experiments/extrapolation.py --root=runs/extrapolation \
        --scale=demo --seeds=3 --parallel=2
    python -m transformer_jax.compare runs/extrapolation \
        --baseline=positions=sinusoidal,position_scale=1 --by_length=16,24,32,40,48 \
        --out=experiments/results/extrapolation_demo

Every point trains on the ``builtin_long`` corpus (data/long_corpus.py), whose train and
validation sources have at most L = 16 words, and translates its 1,000 test sentences, 200 in
each source-length bucket of 1-16, 17-24, 25-32, 33-40 and 41-48 words (up to 3L). Four
settings: the paper's sinusoids, learned positions (Table 3 row E), rotary positions (RoPE)
and the same rotary models translating with position interpolation (decode.position_scale =
0.333 = L / 3L: positions are multiplied by it when translating, so the longest test
sentences span the distances seen in training). decode.* changes nothing in training, so
the interpolated points are the rotary points' trained models translated again: with the
argument ``trained`` the sweep holds the three settings that train (its points named
without the scale, which does not vary among them), and the full sweep then resumes the
copied rotary workdirs at their last step, which only translates the test split: the same
result as training them again, at the cost of the translation alone. (Running the full
sweep alone gives the same report, training the rotary models twice.)
``--by_length`` reports test BLEU per bucket with
sacreBLEU's paired bootstrap against sinusoidal within each bucket, and plots BLEU against
length. experiments/results/extrapolation_demo/ holds a measured run with three seeds.
"""

from transformer_jax.sweeps.experiment import Sweep

# L / 3L: the scale that maps the longest test sentences onto the lengths trained on.
INTERPOLATION = 0.333


def get_sweep(arg: str | None = None) -> Sweep:
    """The four settings; with ``arg`` "trained", the three that train (not the
    interpolated one)."""
    settings = [("sinusoidal", 1.0), ("learned", 1.0), ("rotary", 1.0)]
    if arg != "trained":
        settings.append(("rotary", INTERPOLATION))
    grid = [{"model.positions": positions, "decode.position_scale": scale}
            for positions, scale in settings]
    return Sweep(
        name="extrapolation",
        config="configs/demo.py",
        grid=grid,
        parameter="model.positions",
        overrides={"data.name": "builtin_long"},
        demo_overrides={"train.bleu_sentences": 1000},
        description="positions trained on sources up to 16 words, tested up to 48",
    )
