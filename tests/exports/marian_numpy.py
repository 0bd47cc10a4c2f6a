"""MarianMT's forward pass in numpy, written from the architecture's description (Hugging
Face's MarianMT and BART model docs and Marian's config fields), not from our model or our
export: the tests run it on the exported ``model.safetensors`` and ``config.json`` and compare
its logits with our model's, without PyTorch or transformers.

What MarianMT computes (post-LN BART layers with Marian's embeddings):

* token embeddings (one matrix, ``model.shared.weight``, shared by encoder, decoder and the
  output layer) times sqrt(d_model) when ``scale_embedding``, plus a static sinusoidal table
  whose channels 0 .. d/2 - 1 are sin(pos / 10000^(2i/d)) and d/2 .. d - 1 the cosines of the
  same frequencies; positions count from 0, no offset, no LayerNorm after the embeddings;
* each layer: x = LayerNorm(x + SelfAttention(x)), in the decoder then
  x = LayerNorm(x + CrossAttention(x, encoder output)), then x = LayerNorm(x + fc2(relu(fc1(x))));
  the query is scaled by head_dim^-0.5 after its projection; no final LayerNorm of the stacks;
* LayerNorm's epsilon is 1e-5 (torch's default, which MarianMT keeps);
* logits = x @ shared.T + final_logits_bias.

Linear layers keep torch's layout, ``weight`` [out, in]: y = x @ weight.T + bias.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5
NEG = -1e9


def position_table(n_positions: int, dim: int) -> np.ndarray:
    """MarianMT's static table [n_positions, dim]: sines first, then cosines."""
    pos = np.arange(n_positions, dtype=np.float64)[:, None]
    j = np.arange(dim)[None, :]
    angle = pos / np.power(10000.0, 2 * (j // 2) / dim)
    half = (dim + 1) // 2
    out = np.empty((n_positions, dim))
    out[:, :half] = np.sin(angle[:, 0::2])
    out[:, half:] = np.cos(angle[:, 1::2])
    return out.astype(np.float32)


def _linear(sd: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    return x @ sd[f"{name}.weight"].T + sd[f"{name}.bias"]


def _norm(sd: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * sd[f"{name}.weight"] + sd[f"{name}.bias"]


def _attention(sd, name, x, memory, heads, allowed):
    """Multi-head attention of ``x`` [b, t, d] over ``memory`` [b, s, d]; ``allowed``
    [b, t, s] is False where a query may not look."""
    b, t, d = x.shape
    s, hd = memory.shape[1], d // heads
    split = lambda y, n: y.reshape(b, n, heads, hd).transpose(0, 2, 1, 3)  # noqa: E731
    q = split(_linear(sd, f"{name}.q_proj", x) * hd ** -0.5, t)
    k = split(_linear(sd, f"{name}.k_proj", memory), s)
    v = split(_linear(sd, f"{name}.v_proj", memory), s)
    scores = np.where(allowed[:, None], q @ k.transpose(0, 1, 3, 2), NEG)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    weights = scores / scores.sum(-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return _linear(sd, f"{name}.out_proj", out)


def _embed(sd, config, ids):
    d = config["d_model"]
    scale = np.sqrt(d) if config["scale_embedding"] else 1.0
    table = position_table(config["max_position_embeddings"], d)
    return sd["model.shared.weight"][ids] * scale + table[: ids.shape[1]]


def logits(sd: dict[str, np.ndarray], config: dict, input_ids: np.ndarray,
           decoder_input_ids: np.ndarray) -> np.ndarray:
    """MarianMTModel's logits [b, t, vocab] for ``input_ids`` [b, s] (padding
    ``config["pad_token_id"]``, masked as keys) and ``decoder_input_ids`` [b, t] (the
    targets shifted right, starting with ``decoder_start_token_id``), as float64."""
    sd = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    heads = config["encoder_attention_heads"]
    keys = input_ids != config["pad_token_id"]  # [b, s]
    x = _embed(sd, config, input_ids)
    for i in range(config["encoder_layers"]):
        p = f"model.encoder.layers.{i}"
        x = _norm(sd, f"{p}.self_attn_layer_norm",
                  x + _attention(sd, f"{p}.self_attn", x, x, heads,
                                 np.broadcast_to(keys[:, None], (*keys.shape, keys.shape[1]))))
        x = _norm(sd, f"{p}.final_layer_norm",
                  x + _linear(sd, f"{p}.fc2", np.maximum(_linear(sd, f"{p}.fc1", x), 0)))
    memory = x
    t = decoder_input_ids.shape[1]
    causal = np.broadcast_to(np.tril(np.ones((t, t), bool)), (len(decoder_input_ids), t, t))
    cross = np.broadcast_to(keys[:, None], (len(keys), t, keys.shape[1]))
    y = _embed(sd, config, decoder_input_ids)
    heads = config["decoder_attention_heads"]
    for i in range(config["decoder_layers"]):
        p = f"model.decoder.layers.{i}"
        y = _norm(sd, f"{p}.self_attn_layer_norm",
                  y + _attention(sd, f"{p}.self_attn", y, y, heads, causal))
        y = _norm(sd, f"{p}.encoder_attn_layer_norm",
                  y + _attention(sd, f"{p}.encoder_attn", y, memory, heads, cross))
        y = _norm(sd, f"{p}.final_layer_norm",
                  y + _linear(sd, f"{p}.fc2", np.maximum(_linear(sd, f"{p}.fc1", y), 0)))
    return y @ sd["model.shared.weight"].T + sd["final_logits_bias"].reshape(-1)


def state_dict_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor MarianMTModel's state dict holds for ``config`` and its shape (the tied
    output layer, ``lm_head.weight``, is ``model.shared.weight`` and not saved apart)."""
    d, v, n = config["d_model"], config["vocab_size"], config["max_position_embeddings"]
    shapes: dict[str, tuple[int, ...]] = {"model.shared.weight": (v, d),
                                          "final_logits_bias": (1, v)}
    for side, blocks in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "encoder_attn"))):
        shapes[f"model.{side}.embed_positions.weight"] = (n, d)
        ffn = config[f"{side}_ffn_dim"]
        for i in range(config[f"{side}_layers"]):
            p = f"model.{side}.layers.{i}"
            for block in blocks:
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    shapes[f"{p}.{block}.{proj}.weight"] = (d, d)
                    shapes[f"{p}.{block}.{proj}.bias"] = (d,)
                shapes[f"{p}.{block}_layer_norm.weight"] = (d,)
                shapes[f"{p}.{block}_layer_norm.bias"] = (d,)
            shapes[f"{p}.fc1.weight"], shapes[f"{p}.fc1.bias"] = (ffn, d), (ffn,)
            shapes[f"{p}.fc2.weight"], shapes[f"{p}.fc2.bias"] = (d, ffn), (d,)
            shapes[f"{p}.final_layer_norm.weight"] = (d,)
            shapes[f"{p}.final_layer_norm.bias"] = (d,)
    return shapes
