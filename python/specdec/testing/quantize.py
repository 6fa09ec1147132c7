"""Quantizing float weights into GGUF block formats, for test models.

F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 use gguf-py's reference quantizers (llama.cpp's
``quantize_row_*_ref``). gguf-py cannot quantize K-quants or IQ4, so Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
IQ4_NL and IQ4_XS are written here with plain per-(sub-)block scales and rounding to the nearest
level (no iterative scale search): well-formed blocks whose values approximate the input, laid
out exactly as ``dequantize_row_q{2,3,4,5,6}_K`` / ``dequantize_row_iq4_{nl,xs}`` read them
(ggml-common.h). Needs the ``gguf`` package (``pip install specdec[test]``).
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import quantize as _gguf_quantize

__all__ = ["WEIGHT_FORMATS", "block_size", "quantize", "storage_format"]

# Every weight format the test models come in, by GGUF type name.
WEIGHT_FORMATS = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
                  "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")
_QK_K = 256


def block_size(fmt: str) -> int:
    """Elements per block along a row (ne0 must be a multiple)."""
    return {"F32": 1, "F16": 1, "BF16": 1}.get(
        fmt, _QK_K if fmt.endswith("_K") or fmt == "IQ4_XS" else 32)


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
    own = {"Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
           "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs}
    if fmt in own:
        packed = own[fmt](x.reshape(-1, block_size(fmt)))
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


# ggml's kvalues_iq4nl: the value each 4-bit IQ4 index stands for.
_IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                       dtype=np.float32)


def _signed_max(sub: np.ndarray) -> np.ndarray:
    """The element of largest magnitude of each row of [..., n], with its sign."""
    idx = np.abs(sub).argmax(axis=-1)
    return np.take_along_axis(sub, idx[..., None], axis=-1)[..., 0]


def _iq4_indices(sub: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Nearest-value indices of sub [..., 32] for one step per row, packed as 16 nibble bytes
    (element j low, j + 16 high)."""
    v = np.divide(sub, step[..., None], out=np.zeros_like(sub), where=step[..., None] != 0)
    idx = np.abs(v[..., None] - _IQ4_VALUES).argmin(axis=-1).astype(np.uint8)
    return idx[..., :16] | (idx[..., 16:] << 4)


def _iq4_nl(blocks: np.ndarray) -> np.ndarray:
    d = _f16(_signed_max(blocks) / -127)                  # the largest value -> -127
    return np.concatenate([d.view(np.uint8).reshape(-1, 2),
                           _iq4_indices(blocks, d.astype(np.float32))], axis=1)


def _iq4_xs(blocks: np.ndarray) -> np.ndarray:
    sub = blocks.reshape(-1, 8, 32)
    scale = _signed_max(sub) / -127                        # [n, 8]
    d = _f16(_signed_max(scale) / -32)                     # 6-bit signed sub-block scales
    d32 = d.astype(np.float32)
    lev = np.clip(np.rint(np.divide(scale, d32[:, None], out=np.zeros_like(scale),
                                    where=d32[:, None] != 0)), -32, 31).astype(np.int32)
    ls = (lev + 32).astype(np.uint16)                      # [n, 8] in 0..63
    scales_h = np.zeros(ls.shape[0], dtype=np.uint16)
    for ib in range(8):
        scales_h |= (ls[:, ib] >> 4) << (2 * ib)
    low = (ls & 0xF).astype(np.uint8)
    scales_l = low[:, 0::2] | (low[:, 1::2] << 4)          # [n, 4]
    qs = _iq4_indices(sub, d32[:, None] * lev).reshape(-1, 128)
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), scales_h.view(np.uint8).reshape(-1, 2),
                           scales_l, qs], axis=1)


def _q3_k(blocks: np.ndarray) -> np.ndarray:
    """Signed max-abs per 16-element sub-block (the largest -> -4), 6-bit signed sub-block scales
    against one f16 scale; stored q + 4: 2 bits in qs, the third in hmask."""
    sub = blocks.reshape(-1, 16, 16)
    s = _signed_max(sub) / -4                              # q in [-4, 3]: the largest -> -4
    d = _f16(_signed_max(s) / -32)                         # 6-bit signed scales in [-32, 31]
    d32 = d.astype(np.float32)
    lev = np.clip(np.rint(np.divide(s, d32[:, None], out=np.zeros_like(s),
                                    where=d32[:, None] != 0)), -32, 31).astype(np.int32)
    step = (d32[:, None] * lev).astype(np.float32)
    q = np.divide(sub, step[..., None], out=np.zeros_like(sub), where=step[..., None] != 0)
    q = (np.clip(np.rint(q), -4, 3) + 4).astype(np.uint8)  # [n, 16, 16] stored 0..7
    q = q.reshape(-1, 2, 4, 2, 16)                         # [block, 128-half n, j, 16-half h, l]
    qs = np.zeros((q.shape[0], 2, 2, 16), dtype=np.uint8)  # byte 32n + 16h + l, bits 2j, 2j + 1
    hm = np.zeros((q.shape[0], 2, 16), dtype=np.uint8)     # byte 16h + l, bit 4n + j
    for n in range(2):
        for j in range(4):
            qs[:, n] |= (q[:, n, j] & 3) << (2 * j)
            hm |= (q[:, n, j] >> 2) << (4 * n + j)
    ls = (lev + 32).astype(np.uint8)                       # [n, 16] in 0..63
    scales = np.zeros((q.shape[0], 12), dtype=np.uint8)
    for i in range(16):
        scales[:, i % 8] |= (ls[:, i] & 0xF) << (4 * (i // 8))
        scales[:, 8 + i % 4] |= (ls[:, i] >> 4) << (2 * (i // 4))
    return np.concatenate([hm.reshape(-1, 32), qs.reshape(-1, 64), scales,
                           d.view(np.uint8).reshape(-1, 2)], axis=1)


def _q2_k(blocks: np.ndarray) -> np.ndarray:
    """Min/max per 16-element sub-block (min clamped to <= 0), 4-bit scales and mins against f16
    d and dmin; q in 0..3 as 2-bit fields of qs (byte 32n + 16h + l, bits 2j)."""
    sub = blocks.reshape(-1, 16, 16)
    mn = np.minimum(sub.min(axis=-1), 0.0)
    scale = (sub.max(axis=-1) - mn) / 3                    # [n, 16]
    d = _f16(scale.max(axis=-1) / 15)
    dmin = _f16((-mn).max(axis=-1) / 15)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(np.rint(np.divide(scale, d32[:, None], out=np.zeros_like(scale),
                                   where=d32[:, None] > 0)), 0, 15).astype(np.uint8)
    m = np.clip(np.rint(np.divide(-mn, dmin32[:, None], out=np.zeros_like(mn),
                                  where=dmin32[:, None] > 0)), 0, 15).astype(np.uint8)
    step = d32[:, None] * sc
    q = np.divide(sub + (dmin32[:, None] * m)[..., None], step[..., None],
                  out=np.zeros_like(sub), where=step[..., None] > 0)
    q = np.clip(np.rint(q), 0, 3).astype(np.uint8).reshape(-1, 2, 4, 2, 16)  # [blk, n, j, h, l]
    qs = np.zeros((q.shape[0], 2, 2, 16), dtype=np.uint8)
    for j in range(4):
        qs |= q[:, :, j] << (2 * j)
    return np.concatenate([sc | (m << 4), qs.reshape(-1, 64), d.view(np.uint8).reshape(-1, 2),
                           dmin.view(np.uint8).reshape(-1, 2)], axis=1)
