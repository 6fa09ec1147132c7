"""RoPE as llama.cpp computes it (ggml-cpu's rope with rope_yarn, llama_context's attn_factor),
in float64: the NumPy reference's rotary embedding, written from llama.cpp's definitions and
independent of specdec's tables (docs/reference_model.md)."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

__all__ = ["rope", "rope_yarn", "yarn_attn_factor", "yarn_corr_dims"]


def rope(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, neox: bool,
         freq_scale: float = 1.0, freq_factors: Optional[np.ndarray] = None) -> np.ndarray:
    """Rotary embedding of x [n, heads, head_dim] over its first n_rot dims.

    NORM (llama, deepseek2) rotates adjacent pairs (2i, 2i+1); NEOX (qwen, gemma) rotates
    (i, i + n_rot/2). theta_i = p * freq_scale * base^(-2i/n_rot) [/ freq_factors[i]].
    """
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    if freq_factors is not None:
        inv = inv / freq_factors[:half].astype(np.float64)
    theta = positions.astype(np.float64)[:, None] * freq_scale * inv[None, :]  # [n, half]
    return _rotate(x, theta, 1.0, n_rot, neox)


def yarn_corr_dims(n_rot: int, n_ctx_orig: int, base: float, beta_fast: float,
                   beta_slow: float) -> Tuple[float, float]:
    """ggml_rope_yarn_corr_dims: the pair indices solving n_ctx_orig = 2 pi beta base^(2i/n_rot)
    for beta_fast (floored) and beta_slow (ceiled), clamped to [0, n_rot - 1]."""
    def corr_dim(beta: float) -> float:
        return n_rot * math.log(n_ctx_orig / (beta * 2 * math.pi)) / (2 * math.log(base))
    return max(0.0, math.floor(corr_dim(beta_fast))), min(n_rot - 1.0, math.ceil(corr_dim(beta_slow)))


def yarn_attn_factor(factor: float, ext_factor: float, rope_attn_factor: float) -> float:
    """The attn_factor llama_context hands to ggml's rope: get_mscale(factor, 1) cancelled by
    1 / (1 + 0.1 ln factor) when ext_factor != 0, times rope.scaling.attn_factor."""
    a = 1.0
    if ext_factor != 0:
        get_mscale = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
        a = get_mscale / (1.0 + 0.1 * math.log(factor))
    return a * rope_attn_factor


def rope_yarn(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, neox: bool,
              freq_scale: float, ext_factor: float, attn_factor: float,
              corr_dims: Tuple[float, float], freq_factors: Optional[np.ndarray] = None) -> np.ndarray:
    """ggml's rope with YaRN (rope_yarn, per pair i of the first n_rot dims): theta_extrap =
    p base^(-2i/n_rot) [/ freq_factors[i]], theta_interp = freq_scale theta_extrap, mixed by
    ramp(i) ext_factor (ramp 1 below corr_dims[0], 0 above corr_dims[1]); with ext_factor != 0
    cos and sin are multiplied by attn_factor (1 + 0.1 ln(1 / freq_scale)), else by attn_factor."""
    half = n_rot // 2
    theta_extrap = positions.astype(np.float64)[:, None] * base ** (
        -2.0 * np.arange(half, dtype=np.float64)[None, :] / n_rot)
    if freq_factors is not None:
        theta_extrap = theta_extrap / freq_factors[:half].astype(np.float64)[None, :]
    theta_interp = freq_scale * theta_extrap
    theta, mscale = theta_interp, attn_factor
    if ext_factor != 0:
        y = (np.arange(half, dtype=np.float64) - corr_dims[0]) / max(0.001, corr_dims[1] - corr_dims[0])
        ramp_mix = (1 - np.minimum(1, np.maximum(0, y)))[None, :] * ext_factor
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    return _rotate(x, theta, mscale, n_rot, neox)


def _rotate(x: np.ndarray, theta: np.ndarray, mscale: float, n_rot: int, neox: bool) -> np.ndarray:
    """x [n, heads, head_dim] with pair i of token t rotated by theta [n, n_rot/2], cos and sin
    times mscale."""
    half = n_rot // 2
    cos = (np.cos(theta) * mscale)[:, None, :]
    sin = (np.sin(theta) * mscale)[:, None, :]
    out = x.astype(np.float64).copy()
    if neox:
        x0, x1 = out[..., :half].copy(), out[..., half:n_rot].copy()
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        x0, x1 = out[..., 0:n_rot:2].copy(), out[..., 1:n_rot:2].copy()
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out.astype(np.float32)
