"""Quantizing float weights into GGUF block formats, for test models.

F32, F16, BF16, Q8_0, Q4_0, Q4_1 and Q5_0 use gguf-py's reference quantizers (llama.cpp's
``quantize_row_*_ref``). gguf-py cannot quantize K-quants, so Q4_K, Q5_K and Q6_K are written here
with plain per-sub-block rounding (no iterative scale search): well-formed blocks whose values
approximate the input, laid out exactly as ``dequantize_row_q{4,5,6}_K`` reads them
(ggml-common.h). Needs the ``gguf`` package (``pip install specdec[test]``).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import quantize as _gguf_quantize

__all__ = ["WEIGHT_FORMATS", "block_size", "quantize", "storage_format"]

# Every weight format the test models come in, by GGUF type name.
WEIGHT_FORMATS = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K")
_QK_K = 256


def block_size(fmt: str) -> int:
    """Elements per block along a row (ne0 must be a multiple)."""
    return {"F32": 1, "F16": 1, "BF16": 1}.get(fmt, _QK_K if fmt.endswith("_K") else 32)


def storage_format(fmt: str, row_length: int) -> str:
    """The format a tensor with rows of ``row_length`` is stored in: ``fmt`` when its blocks fit,
    else Q8_0 (as llama.cpp's quantizer falls back when ne0 % 256 != 0), else F16."""
    if row_length % block_size(fmt) == 0:
        return fmt
    return "Q8_0" if row_length % 32 == 0 else "F16"


def quantize(x: np.ndarray, fmt: str) -> Tuple[np.ndarray, GGMLQuantizationType]:
    """(data, GGUF type) for GGUFWriter.add_tensor(name, data, raw_dtype=type).

    ``x`` is float32 in NumPy shape (rows last-axis contiguous); block formats return uint8
    bytes [..., row_bytes]."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    qtype = GGMLQuantizationType[fmt]
    if fmt == "F32":
        return x, qtype
    if fmt == "F16":
        return x.astype(np.float16), qtype
    if x.shape[-1] % block_size(fmt) != 0:
        raise ValueError(f"rows of {x.shape[-1]} elements cannot be stored as {fmt}: "
                         f"a multiple of {block_size(fmt)} is needed")
    if fmt in ("Q4_K", "Q5_K", "Q6_K"):
        blocks = x.reshape(-1, _QK_K)
        packed = {"Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}[fmt](blocks)
        return packed.reshape(*x.shape[:-1], -1), qtype
    return _gguf_quantize(x, qtype), qtype


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16)


def _scale_min_levels(blocks: np.ndarray, levels: int):
    """Asymmetric 6-bit scales and mins per 32-element sub-block: x ~ d*sc*q - dmin*m."""
    sub = blocks.reshape(-1, 8, 32)
    mn = np.minimum(sub.min(axis=-1), 0.0)                # ggml clamps the min to <= 0
    scale = (sub.max(axis=-1) - mn) / levels              # [n, 8]
    d = _f16(scale.max(axis=-1) / 63)                     # [n]
    dmin = _f16((-mn).max(axis=-1) / 63)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(np.rint(np.divide(scale, d32[:, None], out=np.zeros_like(scale),
                                   where=d32[:, None] > 0)), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(np.divide(-mn, dmin32[:, None], out=np.zeros_like(mn),
                                  where=dmin32[:, None] > 0)), 0, 63).astype(np.uint8)
    step = d32[:, None] * sc                               # [n, 8]
    offset = dmin32[:, None] * m
    q = np.divide(sub + offset[..., None], step[..., None], out=np.zeros_like(sub),
                  where=step[..., None] > 0)
    q = np.clip(np.rint(q), 0, levels).astype(np.uint8)   # [n, 8, 32]
    return d, dmin, _pack_scales_k4(sc, m), q


def _pack_scales_k4(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The 12 scale bytes read by get_scale_min_k4: 6-bit sc/m for 8 sub-blocks."""
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return out


def _nibbles(q: np.ndarray) -> np.ndarray:
    """qs[128]: chunk c's 32 bytes hold sub-block 2c in low nibbles and 2c+1 in high ones."""
    q = q.reshape(-1, 4, 2, 32)
    return ((q[:, :, 0, :] & 0xF) | ((q[:, :, 1, :] & 0xF) << 4)).reshape(-1, 128).astype(np.uint8)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, scales, q = _scale_min_levels(blocks, 15)
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                           scales, _nibbles(q)], axis=1)


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, scales, q = _scale_min_levels(blocks, 31)
    high = (q >> 4).reshape(-1, 8, 32).astype(np.uint8)   # bit j of qh[l]: 5th bit of sub-block j
    qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        qh |= high[:, j, :] << j
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                           scales, qh, _nibbles(q)], axis=1)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    sub = blocks.reshape(-1, 16, 16)
    s = np.abs(sub).max(axis=-1) / 31                      # symmetric, q in [-32, 31]
    d = _f16(s.max(axis=-1) / 127)
    d32 = d.astype(np.float32)
    sc = np.clip(np.rint(np.divide(s, d32[:, None], out=np.zeros_like(s), where=d32[:, None] > 0)),
                 0, 127).astype(np.int8)
    step = d32[:, None] * sc
    q = np.divide(sub, step[..., None], out=np.zeros_like(sub), where=step[..., None] > 0)
    q = (np.clip(np.rint(q), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(-1, 2, 4, 32)  # [block, 128-half, 32-group k, l]
    ql = np.concatenate([(q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4),
                         (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)], axis=-1)  # [n, 2, 64]
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4)
          | ((q[:, :, 3] >> 4) << 6))                                               # [n, 2, 32]
    return np.concatenate([ql.reshape(-1, 128).astype(np.uint8),
                           qh.reshape(-1, 64).astype(np.uint8),
                           sc.view(np.uint8), d.view(np.uint8).reshape(-1, 2)], axis=1)
