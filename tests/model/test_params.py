"""Parameter counts against Table 3, and the FLOPs formula counted by hand."""

import subprocess
import sys
from pathlib import Path

import pytest

from transformer_jax import config as config_lib, paper
from transformer_jax.model import counts
from transformer_jax.model.spec import TransformerConfig

ROOT = Path(__file__).resolve().parents[2]
SIZED_ROWS = [name for name, (_, _, size) in paper.TABLE3.items() if size is not None]
# Row C with d_model = 1024 is the one row the paper's own architecture cannot reach at
# V = 37,000: counted exactly it is 163.9M, 4.1M short of the 168M printed. (With a
# vocabulary near 41,000 every row but "big" agrees within 0.5M, which suggests the table was
# computed with a different vocabulary.) The test pins the exact count instead.
C_D1024_EXACT = 163_907_720


def model_of(config):
    """The model of an experiment config, with the vocabulary it asks for."""
    return TransformerConfig.from_config(config.model, config.data.vocab_size)


def test_base_model_count_by_hand():
    v, d, f, n = 37000, 512, 2048, 6
    attention = 4 * d * d + 3 * d  # Q, K, V, O; biases on Q, V and O
    ffn = 2 * d * f + f + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    expected = v * d + v + n * (encoder_layer + decoder_layer)  # + the softmax bias
    assert counts.num_params(model_of(config_lib.build("base"))) == expected == 63_110_280


@pytest.mark.parametrize("name", SIZED_ROWS)
def test_table3_sizes_within_2_5M(name):
    count = counts.num_params(model_of(config_lib.build(name)))
    if name == "C_d1024":
        assert count == C_D1024_EXACT
        return
    paper_count = paper.TABLE3[name][2] * 1e6
    assert abs(count - paper_count) <= 2.5e6, f"{name}: {count / 1e6:.2f}M vs {paper_count:.0f}"


def test_seed_example_embedding_matrix():
    shapes = counts.param_shapes(TransformerConfig(vocab_size=30000, d_model=512, num_layers=1))
    assert counts.count(shapes["shared_embedding"]) == 15_360_000


def test_flops_formula_on_a_small_model_by_hand():
    cfg = TransformerConfig(vocab_size=10, num_layers=1, d_model=4, d_ff=8, num_heads=2, d_k=2,
                            d_v=2)
    # Matmul parameters (embedding counted once, as the output projection):
    emb = 10 * 4 + 10  # the shared matrix and the softmax bias
    attention = 4 * 4 * 4 + 3 * 4  # no key bias
    ffn = 4 * 8 + 8 + 8 * 4 + 4
    norms = 2 * 4
    total = emb + (attention + ffn + 2 * norms) + (2 * attention + ffn + 3 * norms)
    seq = 16
    attn_flops = 3 * 3 * (2 * seq * 2 * (2 + 2))  # 3 blocks, fwd+bwd, QK^T and AV
    assert counts.train_flops_per_token(cfg, seq) == 6 * total + attn_flops


def test_params_command_prints_the_count():
    result = subprocess.run(
        [sys.executable, "-m", "transformer_jax.params", "--config=configs/table3.py:C_N2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "params: 33690760" in result.stdout


def test_seed_example_quadratic_bill():
    base = model_of(config_lib.build("base"))
    assert counts.attention_matrices_per_forward(base) == 96
    assert counts.attention_matrix_bytes(512) == 512 * 512 * 2 == 524_288
    assert counts.attention_matrix_bytes(32_768) // counts.attention_matrix_bytes(512) == 4096
