"""NumPy reference of a DFlash drafter's block forward (z-lab's DFlashDraftModel, written here
from its description): the context is hidden_norm(fc(concat of the target's hidden states after
target_layer_ids)); every layer projects that same context to K/V (k_norm, RoPE at the context
positions) beside the block's own K/V, and the block [last token, mask x k] attends to both with
no causal mask. Embeddings and the head are the target's (NumpyModel)."""

from __future__ import annotations

import math
from typing import Dict, Sequence

import numpy as np

from reference.numpy_model import NumpyModel, _attention, rms_norm, rope


def _silu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 / (1.0 + np.exp(-x64))).astype(np.float32)


def dflash_block_logits(target: NumpyModel, config: dict, w: Dict[str, np.ndarray],
                        context_tokens: Sequence[int], block_tokens: Sequence[int]) -> np.ndarray:
    """Logits [len(block_tokens), vocab] of the drafter for a block at positions
    len(context_tokens) .. after the context (the target's forward over context_tokens)."""
    dc = config["dflash_config"]
    ids = list(dc["target_layer_ids"])
    n_ctx = len(context_tokens)
    out = target.forward(list(context_tokens), hidden_layers=ids)
    hidden = np.concatenate([out.hidden_states[i] for i in ids], axis=-1)
    eps = config["rms_norm_eps"]
    ctx = rms_norm(hidden @ w["fc.weight"].T, w["hidden_norm.weight"], eps)
    x = target.tensors.rows("token_embd.weight", np.asarray(list(block_tokens)))
    x = x * np.float32(dc.get("input_embedding_scale", config.get("input_embedding_scale", 1.0)))
    heads, kvh, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    theta = config["rope_theta"]
    n = x.shape[0]
    pos_ctx = np.arange(n_ctx)
    pos_blk = np.arange(n_ctx, n_ctx + n)
    keys = np.concatenate([pos_ctx, pos_blk])
    both_ways = np.ones((n, n_ctx + n), dtype=bool)  # full-attention layers: non-causal
    types = config.get("layer_types") or ["full_attention"] * config["num_hidden_layers"]
    window = config.get("sliding_window") or 0
    # sliding layers: causal, keys within the window (p - k < window)
    windowed = (keys[None, :] <= pos_blk[:, None]) & (pos_blk[:, None] - keys[None, :] < window)
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, heads, hd)
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
        k_ctx = (ctx @ w[p + "self_attn.k_proj.weight"].T).reshape(n_ctx, kvh, hd)
        v_ctx = (ctx @ w[p + "self_attn.v_proj.weight"].T).reshape(n_ctx, kvh, hd)
        k_blk = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, kvh, hd)
        v_blk = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, kvh, hd)
        k_ctx = rope(rms_norm(k_ctx, w[p + "self_attn.k_norm.weight"], eps), pos_ctx, hd, theta, True)
        k_blk = rope(rms_norm(k_blk, w[p + "self_attn.k_norm.weight"], eps), pos_blk, hd, theta, True)
        q = rope(q, pos_blk, hd, theta, True)
        k = np.concatenate([k_ctx, k_blk])
        v = np.concatenate([v_ctx, v_blk])
        allowed = windowed if types[i] == "sliding_attention" else both_ways
        o = _attention(q, k, v, allowed, 1.0 / math.sqrt(hd), 0.0)
        x = x + o.reshape(n, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = _silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + g @ w[p + "mlp.down_proj.weight"].T
    final = rms_norm(x, w["norm.weight"], eps)
    return target._logits(final)
