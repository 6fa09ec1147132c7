"""Weight formats and quantized matmul, checked against an independent implementation.

The ``gguf`` PyPI package (llama.cpp's own Python reader) dequantizes the blocks of the real
models; specdec's C++ dequantizer must give the same values, its device matmul must agree with
NumPy over those values, and device rows must be bitwise batch-invariant.
"""

from __future__ import annotations

import functools

import gguf
import numpy as np
import pytest

import specdec
from specdec import quant

MODELS = [
    "smollm2-135m-instruct-q4_1",
    "gemma-3-270m-q4_k_m",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
]
MAX_ROWS = 640  # rows taken from a tensor (the large vocab matrices are sliced)


@functools.lru_cache(maxsize=None)
def reader_of(path: str) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)  # parsing a 262144-token vocabulary takes seconds: once per file


def tensors_by_type(path: str) -> dict[str, list]:
    """2-D tensors of a model grouped by ggml type name: the first and the last of each type."""
    reader = reader_of(path)
    groups: dict[str, list] = {}
    for t in reader.tensors:
        if len(t.shape) == 2:
            groups.setdefault(t.tensor_type.name, []).append(t)
    return {name: [ts[0], ts[-1]] if len(ts) > 1 else ts for name, ts in groups.items()}


def type_name(t) -> str:
    name = t.tensor_type.name.lower()
    return name[:-2] + "_K" if name.endswith("_k") else name


def raw_rows(t, rows: int) -> tuple[np.ndarray, int, int]:
    """The bytes of the first `rows` rows of a 2-D tensor, and (rows, cols)."""
    cols, all_rows = int(t.shape[0]), int(t.shape[1])
    rows = min(rows, all_rows)
    data = np.ascontiguousarray(t.data.reshape(all_rows, -1).view(np.uint8)[:rows])
    return data, rows, cols


def gguf_dequantize(t, data: np.ndarray, rows: int, cols: int) -> np.ndarray:
    if t.tensor_type in (gguf.GGMLQuantizationType.F32,):
        return data.view(np.float32).reshape(rows, cols)
    return gguf.quants.dequantize(data.reshape(rows, -1), t.tensor_type).reshape(rows, cols).astype(np.float32)


@pytest.mark.parametrize("model", MODELS)
def test_dequantize_matches_gguf_on_real_tensors(model, real_model):
    path = real_model(model)
    seen = set()
    for name, ts in tensors_by_type(path).items():
        for t in ts:
            data, rows, cols = raw_rows(t, MAX_ROWS)
            ours = quant.dequantize(type_name(t), data, rows, cols)
            ref = gguf_dequantize(t, data, rows, cols)
            # The same float operations in the same order: equal up to float32 rounding of
            # products that numpy may group differently (d * sc * q).
            np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-7, err_msg=f"{model} {t.name}")
            seen.add(type_name(t))
    assert seen <= set(quant.supported_weight_types())


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                                 "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs"])
def test_quantize_layout_matches_gguf(fmt):
    """Blocks written by specdec's quantizer read back the same through gguf's dequantizer."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((6, 512)) * 0.1).astype(np.float32)
    blocks = quant.quantize(fmt, x)
    ours = quant.dequantize(fmt, blocks, 6, 512)
    qtype = gguf.GGMLQuantizationType[fmt.upper()]
    if fmt == "f32":
        ref = blocks.view(np.float32).reshape(6, 512)
    else:
        ref = gguf.quants.dequantize(blocks.reshape(6, -1), qtype).reshape(6, 512)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-7)
    # 3 and 2 bits without a scale search: about 0.15 and 0.33
    bound = {"q3_K": 0.2, "q2_K": 0.4}.get(fmt, 0.15)
    assert np.sqrt(np.mean((ours - x) ** 2)) <= bound * np.sqrt(np.mean(x**2))


@pytest.mark.parametrize("model", MODELS)
def test_device_matmul_real_tensors(model, real_model, context):
    """Device y = x . W^T against NumPy in float64 over gguf's dequantized W, and bitwise against
    the host emulation of the kernels; rows are bitwise the same alone and in a batch."""
    path = real_model(model)
    rng = np.random.default_rng(7)
    for ts in tensors_by_type(path).values():
        t = ts[-1]
        data, rows, cols = raw_rows(t, MAX_ROWS)
        fmt = type_name(t)
        w = quant.upload_weight(context, fmt, data, [cols, rows], t.name)
        x = rng.standard_normal((5, cols)).astype(np.float32)
        y = quant.matmul(context, w, x)
        wf = gguf_dequantize(t, data, rows, cols).astype(np.float64)
        exact = x.astype(np.float64) @ wf.T
        scale = np.sqrt(np.mean((wf**2).mean(axis=0) * (x.astype(np.float64) ** 2).mean(axis=0)) * cols)
        tol = 1e-5 if fmt in ("f32", "f16", "bf16") else 2e-2  # int8 activations for block formats
        assert np.sqrt(np.mean((y - exact) ** 2)) <= tol * scale, f"{model} {t.name}"
        emulated = quant.matmul_reference(fmt, data, rows, cols, x, "device")
        assert np.array_equal(y, emulated), f"{model} {t.name}: device differs from its emulation"
        for i in range(5):
            alone = quant.matmul(context, w, x[i : i + 1])
            assert np.array_equal(alone[0], y[i]), f"{model} {t.name}: row {i} not batch-invariant"


@pytest.mark.parametrize("model", MODELS)
def test_embedding_lookup_real_tensors(model, real_model, context):
    path = real_model(model)
    t = next(t for t in reader_of(path).tensors if t.name == "token_embd.weight")
    data, rows, cols = raw_rows(t, 4096)
    w = quant.upload_weight(context, type_name(t), data, [cols, rows], t.name)
    ids = [0, 1, 17, rows - 1, 1000]
    out = quant.embedding_lookup(context, w, ids, 2.0)
    ref = gguf_dequantize(t, data, rows, cols)[ids] * np.float32(2.0)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError):
        quant.embedding_lookup(context, w, [rows])


def test_unsupported_type_names_the_type(context):
    assert not quant.is_weight_type_supported("iq2_xs")
    with pytest.raises(specdec.UnsupportedError, match="q4_K"):
        quant.upload_weight(context, 17, np.zeros(66, np.uint8), [256, 1], "blk.0.attn_q.weight")
